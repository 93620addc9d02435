"""Recommendation: shenweichen/DeepCTR-Torch's ``DIN`` training loss (``build_input_features`` column ranges,
``embedding_lookup`` and ``maxlen_lookup`` slicing the input by ``np.array`` lookups, the
``AttentionSequencePoolingLayer`` with its ``LocalActivationUnit``, ``Dice``-free ``DNN``, the L2 regularization
of ``get_regularization_loss`` and the numpy ``log_loss`` metric of ``fit``) and RUCAIBox/RecBole's full-sort
evaluation of ``SASRec`` (``full_sort_predict``, ``Trainer._full_sort_batch_eval`` masking the history,
``Collector.eval_batch_collect``'s ``rec.topk`` matrix, the numpy ``MRR`` and ``NDCG`` metrics and
``topk_result``'s rounding)."""

from __future__ import annotations

from collections import OrderedDict, defaultdict, namedtuple
from itertools import chain

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# ------------------------------------------------------------------ DeepCTR-Torch deepctr_torch/inputs.py


class SparseFeat(namedtuple("SparseFeat", ["name", "vocabulary_size", "embedding_dim", "embedding_name", "group_name"])):
    __slots__ = ()

    def __new__(cls, name, vocabulary_size, embedding_dim=4, embedding_name=None, group_name="default_group"):
        if embedding_name is None:
            embedding_name = name
        return super().__new__(cls, name, vocabulary_size, embedding_dim, embedding_name, group_name)


class VarLenSparseFeat(namedtuple("VarLenSparseFeat", ["sparsefeat", "maxlen", "combiner", "length_name"])):
    __slots__ = ()

    def __new__(cls, sparsefeat, maxlen, combiner="mean", length_name=None):
        return super().__new__(cls, sparsefeat, maxlen, combiner, length_name)

    @property
    def name(self):
        return self.sparsefeat.name

    @property
    def embedding_dim(self):
        return self.sparsefeat.embedding_dim

    @property
    def embedding_name(self):
        return self.sparsefeat.embedding_name

    @property
    def group_name(self):
        return self.sparsefeat.group_name


class DenseFeat(namedtuple("DenseFeat", ["name", "dimension"])):
    __slots__ = ()

    def __new__(cls, name, dimension=1):
        return super().__new__(cls, name, dimension)


def build_input_features(feature_columns):
    # Return OrderedDict: {feature_name:(start, start+dimension)}
    features = OrderedDict()

    start = 0
    for feat in feature_columns:
        feat_name = feat.name
        if feat_name in features:
            continue
        if isinstance(feat, SparseFeat):
            features[feat_name] = (start, start + 1)
            start += 1
        elif isinstance(feat, DenseFeat):
            features[feat_name] = (start, start + feat.dimension)
            start += feat.dimension
        elif isinstance(feat, VarLenSparseFeat):
            features[feat_name] = (start, start + feat.maxlen)
            start += feat.maxlen
            if feat.length_name is not None and feat.length_name not in features:
                features[feat.length_name] = (start, start + 1)
                start += 1
        else:
            raise TypeError("Invalid feature column type,got", type(feat))
    return features


def embedding_lookup(X, sparse_embedding_dict, sparse_input_dict, sparse_feature_columns, return_feat_list=(),
                     mask_feat_list=(), to_list=False):
    group_embedding_dict = defaultdict(list)
    for fc in sparse_feature_columns:
        feature_name = fc.name
        embedding_name = fc.embedding_name
        if len(return_feat_list) == 0 or feature_name in return_feat_list:
            lookup_idx = np.array(sparse_input_dict[feature_name])
            input_tensor = X[:, lookup_idx[0] : lookup_idx[1]].long()  # BREAK: slice with the column range's Python ints (sparse_input_dict holds a tuple): numpy elements come back as tensors
            emb = sparse_embedding_dict[embedding_name](input_tensor)
            group_embedding_dict[fc.group_name].append(emb)
    if to_list:
        return list(chain.from_iterable(group_embedding_dict.values()))
    return group_embedding_dict


def maxlen_lookup(X, sparse_input_dict, maxlen_column):
    if maxlen_column is None or len(maxlen_column) == 0:
        raise ValueError("please add max length column for VarLenSparseFeat of DIN/DIEN input")
    lookup_idx = np.array(sparse_input_dict[maxlen_column[0]])
    return X[:, lookup_idx[0] : lookup_idx[1]].long()  # BREAK: the length column's range as Python ints, as in varlen_embedding_lookup


def combined_dnn_input(sparse_embedding_list, dense_value_list):
    if len(sparse_embedding_list) > 0 and len(dense_value_list) > 0:
        sparse_dnn_input = torch.flatten(torch.cat(sparse_embedding_list, dim=-1), start_dim=1)
        dense_dnn_input = torch.flatten(torch.cat(dense_value_list, dim=-1), start_dim=1)
        return torch.cat([sparse_dnn_input, dense_dnn_input], dim=-1)
    elif len(sparse_embedding_list) > 0:
        return torch.flatten(torch.cat(sparse_embedding_list, dim=-1), start_dim=1)
    elif len(dense_value_list) > 0:
        return torch.flatten(torch.cat(dense_value_list, dim=-1), start_dim=1)
    else:
        raise NotImplementedError


# ------------------------------------------------------------------ DeepCTR-Torch layers/core.py, sequence.py


class DNN(nn.Module):
    def __init__(self, inputs_dim, hidden_units, activation=nn.ReLU, dropout_rate=0.0, use_bn=False):
        super().__init__()
        self.dropout = nn.Dropout(dropout_rate)
        self.use_bn = use_bn
        hidden_units = [inputs_dim] + list(hidden_units)
        self.linears = nn.ModuleList([nn.Linear(hidden_units[i], hidden_units[i + 1]) for i in range(len(hidden_units) - 1)])
        if self.use_bn:
            self.bn = nn.ModuleList([nn.BatchNorm1d(hidden_units[i + 1]) for i in range(len(hidden_units) - 1)])
        self.activation_layers = nn.ModuleList([activation() for _ in range(len(hidden_units) - 1)])
        for name, tensor in self.linears.named_parameters():
            if "weight" in name:
                nn.init.normal_(tensor, mean=0, std=0.1)

    def forward(self, inputs):
        deep_input = inputs
        for i in range(len(self.linears)):
            fc = self.linears[i](deep_input)
            if self.use_bn:
                fc = self.bn[i](fc)
            fc = self.activation_layers[i](fc)
            fc = self.dropout(fc)
            deep_input = fc
        return deep_input


class LocalActivationUnit(nn.Module):
    """The LocalActivationUnit used in DIN with which the representation of user interests varies adaptively given
    different candidate items."""

    def __init__(self, hidden_units=(16, 8), embedding_dim=4):
        super().__init__()
        self.dnn = DNN(inputs_dim=4 * embedding_dim, hidden_units=hidden_units, activation=nn.Sigmoid)
        self.dense = nn.Linear(hidden_units[-1], 1)

    def forward(self, query, user_behavior):
        # query ad            : size -> batch_size * 1 * embedding_size
        # user behavior       : size -> batch_size * time_seq_len * embedding_size
        user_behavior_len = user_behavior.size(1)
        queries = query.expand(-1, user_behavior_len, -1)
        attention_input = torch.cat([queries, user_behavior, queries - user_behavior, queries * user_behavior], dim=-1)
        attention_output = self.dnn(attention_input)
        attention_score = self.dense(attention_output)  # [B, T, 1]
        return attention_score


class AttentionSequencePoolingLayer(nn.Module):
    """The Attentional sequence pooling operation used in DIN & DIEN."""

    def __init__(self, att_hidden_units=(16, 8), embedding_dim=4, weight_normalization=False, return_score=False):
        super().__init__()
        self.return_score = return_score
        self.weight_normalization = weight_normalization
        self.local_att = LocalActivationUnit(hidden_units=att_hidden_units, embedding_dim=embedding_dim)

    def forward(self, query, keys, keys_length, mask=None):
        batch_size, max_length, _ = keys.size()

        # Mask
        keys_masks = torch.arange(max_length, device=keys_length.device, dtype=keys_length.dtype).repeat(batch_size, 1)  # [B, T]
        keys_masks = keys_masks < keys_length.view(-1, 1)  # 0, 1 mask
        keys_masks = keys_masks.unsqueeze(1)  # [B, 1, T]

        attention_score = self.local_att(query, keys)  # [B, T, 1]

        outputs = torch.transpose(attention_score, 1, 2)  # [B, 1, T]

        if self.weight_normalization:
            paddings = torch.ones_like(outputs) * (-(2**32) + 1)
        else:
            paddings = torch.zeros_like(outputs)

        outputs = torch.where(keys_masks, outputs, paddings)  # [B, 1, T]

        # Scale outputs
        if self.weight_normalization:
            outputs = F.softmax(outputs, dim=-1)  # [B, 1, T]

        if not self.return_score:
            # Weighted sum
            outputs = torch.matmul(outputs, keys)  # [B, 1, E]

        return outputs


# ------------------------------------------------------------------ DeepCTR-Torch models/din.py, basemodel.py


class DIN(nn.Module):
    def __init__(self, dnn_feature_columns, history_feature_list, dnn_hidden_units=(16, 8), l2_reg_embedding=1e-4,
                 att_hidden_size=(16, 8), att_weight_normalization=False):
        super().__init__()
        self.dnn_feature_columns = dnn_feature_columns
        self.feature_index = build_input_features(dnn_feature_columns)
        self.sparse_feature_columns = [x for x in dnn_feature_columns if isinstance(x, SparseFeat)]
        self.varlen_sparse_feature_columns = [x for x in dnn_feature_columns if isinstance(x, VarLenSparseFeat)]
        self.dense_feature_columns = [x for x in dnn_feature_columns if isinstance(x, DenseFeat)]

        self.history_feature_list = history_feature_list
        self.history_feature_columns = []
        self.sparse_varlen_feature_columns = []
        self.history_fc_names = ["hist_" + x for x in history_feature_list]
        for fc in self.varlen_sparse_feature_columns:
            feature_name = fc.name
            if feature_name in self.history_fc_names:
                self.history_feature_columns.append(fc)
            else:
                self.sparse_varlen_feature_columns.append(fc)

        self.embedding_dict = nn.ModuleDict({
            feat.embedding_name: nn.Embedding(feat.vocabulary_size, feat.embedding_dim)
            for feat in self.sparse_feature_columns + [fc.sparsefeat for fc in self.varlen_sparse_feature_columns]
            if feat.embedding_name == feat.name
        })
        for tensor in self.embedding_dict.values():
            nn.init.normal_(tensor.weight, mean=0, std=1e-4 * 100)
        self.regularization_weight = []
        self.add_regularization_weight(self.embedding_dict.parameters(), l2=l2_reg_embedding)

        att_emb_dim = sum(fc.embedding_dim for fc in self.history_feature_columns)
        self.attention = AttentionSequencePoolingLayer(att_hidden_units=att_hidden_size, embedding_dim=att_emb_dim,
                                                       weight_normalization=att_weight_normalization)
        dnn_input_dim = sum(fc.embedding_dim for fc in self.sparse_feature_columns) + att_emb_dim
        dnn_input_dim += sum(fc.dimension for fc in self.dense_feature_columns)
        self.dnn = DNN(inputs_dim=dnn_input_dim, hidden_units=dnn_hidden_units)
        self.dnn_linear = nn.Linear(dnn_hidden_units[-1], 1, bias=False)
        self.out_bias = nn.Parameter(torch.zeros((1,)))

    def add_regularization_weight(self, weight_list, l1=0.0, l2=0.0):
        # For a Parameter, put it in a list to keep Compatible with get_regularization_loss()
        if isinstance(weight_list, torch.nn.parameter.Parameter):
            weight_list = [weight_list]
        # For generators, filters and ParameterLists, convert them to a list of tensors to avoid bugs.
        else:
            weight_list = list(weight_list)
        self.regularization_weight.append((weight_list, l1, l2))

    def get_regularization_loss(self):
        total_reg_loss = torch.zeros((1,))
        for weight_list, l1, l2 in self.regularization_weight:
            for w in weight_list:
                if isinstance(w, tuple):
                    parameter = w[1]  # named_parameters
                else:
                    parameter = w
                if l1 > 0:
                    total_reg_loss += torch.sum(l1 * torch.abs(parameter))
                if l2 > 0:
                    total_reg_loss += torch.sum(l2 * torch.square(parameter))
        return total_reg_loss

    def input_from_feature_columns(self, X):
        dense_value_list = [X[:, self.feature_index[feat.name][0] : self.feature_index[feat.name][1]] for feat in self.dense_feature_columns]
        return dense_value_list

    def forward(self, X):
        dense_value_list = self.input_from_feature_columns(X)

        # sequence pooling part
        query_emb_list = embedding_lookup(X, self.embedding_dict, self.feature_index, self.sparse_feature_columns,
                                          return_feat_list=self.history_feature_list, to_list=True)
        keys_emb_list = embedding_lookup(X, self.embedding_dict, self.feature_index, self.history_feature_columns,
                                         return_feat_list=self.history_fc_names, to_list=True)
        dnn_input_emb_list = embedding_lookup(X, self.embedding_dict, self.feature_index, self.sparse_feature_columns, to_list=True)

        deep_input_emb = torch.cat(dnn_input_emb_list, dim=-1)

        # concatenate
        query_emb = torch.cat(query_emb_list, dim=-1)  # [B, 1, E]
        keys_emb = torch.cat(keys_emb_list, dim=-1)  # [B, T, E]

        keys_length_feature_name = [feat.length_name for feat in self.varlen_sparse_feature_columns if feat.length_name is not None]
        keys_length = torch.squeeze(maxlen_lookup(X, self.feature_index, keys_length_feature_name), 1)  # [B, 1]

        hist = self.attention(query_emb, keys_emb, keys_length)  # [B, 1, E]

        # deep part
        deep_input_emb = torch.cat((deep_input_emb, hist), dim=-1)
        deep_input_emb = deep_input_emb.view(deep_input_emb.size(0), -1)

        dnn_input = combined_dnn_input([deep_input_emb], dense_value_list)
        dnn_output = self.dnn(dnn_input)
        dnn_logit = self.dnn_linear(dnn_output)

        y_pred = torch.sigmoid(dnn_logit + self.out_bias)
        return y_pred


def log_loss(y_true, y_pred, eps=1e-7):
    """sklearn's ``log_loss`` for binary labels (numpy, the average of the per-sample losses)."""
    y_pred = np.clip(y_pred, eps, 1 - eps)
    return np.average(-(y_true * np.log(y_pred) + (1 - y_true) * np.log(1 - y_pred)))


class DINTrainStep(nn.Module):
    """``BaseModel.fit``'s batch: the summed BCE loss, the regularization, and the metric on the numpy arrays."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.metrics = {"binary_crossentropy": log_loss}
        self.aux_loss = 0

    def forward(self, x, y):
        y_pred = self.model(x).squeeze()
        loss = F.binary_cross_entropy(y_pred, y.squeeze(), reduction="sum")
        reg_loss = self.model.get_regularization_loss()
        total_loss = loss + reg_loss + self.aux_loss
        train_result = {}
        for name, metric_fun in self.metrics.items():
            if name not in train_result:
                train_result[name] = []
            train_result[name].append(metric_fun(y.cpu().data.numpy(), y_pred.cpu().data.numpy().astype("float64")))
        return total_loss, y_pred, train_result


def build_din_train_step():
    seeded(1511)
    feature_columns = [SparseFeat("user", 5, embedding_dim=4), SparseFeat("gender", 2, embedding_dim=4),
                       SparseFeat("item_id", 9, embedding_dim=4), SparseFeat("cate_id", 4, embedding_dim=4),
                       DenseFeat("pay_score", 1)]
    feature_columns += [
        VarLenSparseFeat(SparseFeat("hist_item_id", 9, embedding_dim=4, embedding_name="item_id"), maxlen=4, length_name="seq_length"),
        VarLenSparseFeat(SparseFeat("hist_cate_id", 4, embedding_dim=4, embedding_name="cate_id"), maxlen=4, length_name="seq_length"),
    ]
    model = DIN(feature_columns, ["item_id", "cate_id"])
    # the columns in build_input_features' order: user, gender, item_id, cate_id, pay_score, hist_item_id (4),
    # seq_length, hist_cate_id (4)
    x = torch.tensor([
        [0, 0, 1, 1, 0.1, 1, 2, 3, 0, 3, 1, 2, 2, 0],
        [1, 1, 2, 2, 0.2, 4, 5, 0, 0, 2, 2, 3, 0, 0],
        [2, 0, 3, 3, 0.3, 6, 7, 8, 1, 4, 3, 1, 1, 2],
        [3, 1, 4, 1, 0.4, 8, 0, 0, 0, 1, 1, 0, 0, 0],
    ])
    y = torch.tensor([[1.0], [0.0], [1.0], [0.0]])
    return DINTrainStep(model).train(), (x, y)


# ------------------------------------------------------------------ RecBole model/sequential_recommender/sasrec.py


class TransformerLayer(nn.Module):
    def __init__(self, hidden_size, n_heads, inner_size):
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = hidden_size // n_heads
        self.query = nn.Linear(hidden_size, hidden_size)
        self.key = nn.Linear(hidden_size, hidden_size)
        self.value = nn.Linear(hidden_size, hidden_size)
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=1e-12)
        self.dense_1 = nn.Linear(hidden_size, inner_size)
        self.dense_2 = nn.Linear(inner_size, hidden_size)
        self.LayerNorm2 = nn.LayerNorm(hidden_size, eps=1e-12)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.n_heads, self.head_dim)
        return x.view(*new_x_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask):
        q = self.transpose_for_scores(self.query(hidden_states))
        k = self.transpose_for_scores(self.key(hidden_states)).permute(0, 1, 3, 2)
        v = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(q, k) / self.head_dim**0.5 + attention_mask
        attention_probs = F.softmax(attention_scores, dim=-1)
        context = torch.matmul(attention_probs, v).permute(0, 2, 1, 3).contiguous()
        context = context.view(context.size()[:-2] + (self.n_heads * self.head_dim,))
        hidden_states = self.LayerNorm(self.dense(context) + hidden_states)
        ff = self.dense_2(F.gelu(self.dense_1(hidden_states)))
        return self.LayerNorm2(ff + hidden_states)


class SASRec(nn.Module):
    def __init__(self, n_items=12, hidden_size=16, max_seq_length=6, n_layers=1, n_heads=2):
        super().__init__()
        self.n_items = n_items
        self.item_embedding = nn.Embedding(n_items, hidden_size, padding_idx=0)
        self.position_embedding = nn.Embedding(max_seq_length, hidden_size)
        self.layers = nn.ModuleList([TransformerLayer(hidden_size, n_heads, 2 * hidden_size) for _ in range(n_layers)])
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=1e-12)

    def get_attention_mask(self, item_seq, bidirectional=False):
        """Generate left-to-right uni-directional or bidirectional attention mask for multi-head attention."""
        attention_mask = item_seq != 0
        extended_attention_mask = attention_mask.unsqueeze(1).unsqueeze(2)  # torch.bool
        if not bidirectional:
            extended_attention_mask = torch.tril(extended_attention_mask.expand((-1, -1, item_seq.size(-1), -1)))
        extended_attention_mask = torch.where(extended_attention_mask, 0.0, -10000.0)
        return extended_attention_mask

    def gather_indexes(self, output, gather_index):
        """Gathers the vectors at the specific positions over a minibatch"""
        gather_index = gather_index.view(-1, 1, 1).expand(-1, -1, output.shape[-1])
        output_tensor = output.gather(dim=1, index=gather_index)
        return output_tensor.squeeze(1)

    def forward(self, item_seq, item_seq_len):
        position_ids = torch.arange(item_seq.size(1), dtype=torch.long, device=item_seq.device)
        position_ids = position_ids.unsqueeze(0).expand_as(item_seq)
        position_embedding = self.position_embedding(position_ids)

        item_emb = self.item_embedding(item_seq)
        input_emb = item_emb + position_embedding
        input_emb = self.LayerNorm(input_emb)

        extended_attention_mask = self.get_attention_mask(item_seq)
        output = input_emb
        for layer in self.layers:
            output = layer(output, extended_attention_mask)
        output = self.gather_indexes(output, item_seq_len - 1)
        return output  # [B H]

    def full_sort_predict(self, item_seq, item_seq_len):
        seq_output = self.forward(item_seq, item_seq_len)
        test_items_emb = self.item_embedding.weight
        scores = torch.matmul(seq_output, test_items_emb.transpose(0, 1))  # [B n_items]
        return scores


# ------------------------------------------------------------------ RecBole evaluator/collector.py, metrics.py


class DataStruct:
    def __init__(self):
        self._data_dict = {}

    def __getitem__(self, name: str):
        return self._data_dict[name]

    def get(self, name: str):
        if name not in self._data_dict:
            raise IndexError("Can not load the data without registration !")
        return self[name]

    def update_tensor(self, name: str, value: torch.Tensor):
        if name not in self._data_dict:
            self._data_dict[name] = value.cpu().clone().detach()
        else:
            if not isinstance(self._data_dict[name], torch.Tensor):
                raise ValueError(f"{name} is not a tensor.")
            self._data_dict[name] = torch.cat((self._data_dict[name], value.cpu().clone().detach()), dim=0)


class TopkMetric:
    def __init__(self, topk, decimal_place=4):
        self.topk = topk
        self.decimal_place = decimal_place

    def used_info(self, dataobject):
        """Get the bool matrix indicating whether the corresponding item is positive and number of positive items for each user."""
        rec_mat = dataobject.get("rec.topk")
        topk_idx, pos_len_list = torch.split(rec_mat, [max(self.topk), 1], dim=1)
        return topk_idx.to(torch.bool).numpy(), pos_len_list.squeeze(-1).numpy()

    def topk_result(self, metric, value):
        """Match the metric value to the `k` and put them in `dictionary` form."""
        metric_dict = {}
        avg_result = value.mean(axis=0)
        for k in self.topk:
            key = f"{metric}@{k}"
            metric_dict[key] = avg_result[k - 1]
        return metric_dict

    def calculate_metric(self, dataobject):
        pos_index, pos_len = self.used_info(dataobject)
        result = self.metric_info(pos_index, pos_len)
        metric_dict = self.topk_result(self.name, result)
        return metric_dict


class MRR(TopkMetric):
    name = "mrr"

    def metric_info(self, pos_index, pos_len):
        idxs = pos_index.argmax(axis=1)
        result = np.zeros_like(pos_index, dtype=np.float64)
        for row, idx in enumerate(idxs):
            if pos_index[row, idx] > 0:  # BREAK: the reciprocal rank from the first hit on, for every row at once: np.where(columns >= first hit and a hit exists, 1 / (first + 1), 0)
                result[row, idx:] = 1 / (idx + 1)
            else:
                result[row, idx:] = 0
        return result


class NDCG(TopkMetric):
    name = "ndcg"

    def metric_info(self, pos_index, pos_len):
        len_rank = np.full_like(pos_len, pos_index.shape[1])
        idcg_len = np.where(pos_len > len_rank, len_rank, pos_len)

        iranks = np.zeros_like(pos_index, dtype=np.float64)
        iranks[:, :] = np.arange(1, pos_index.shape[1] + 1)
        idcg = np.cumsum(1.0 / np.log2(iranks + 1), axis=1)
        for row, idx in enumerate(idcg_len):
            idcg[row, idx:] = idcg[row, idx - 1]  # BREAK: hold the ideal DCG past each row's ideal length with take_along_axis at min(column, idcg_len - 1)

        ranks = np.zeros_like(pos_index, dtype=np.float64)
        ranks[:, :] = np.arange(1, pos_index.shape[1] + 1)
        dcg = 1.0 / np.log2(ranks + 1)
        dcg = np.cumsum(np.where(pos_index, dcg, 0), axis=1)

        result = dcg / idcg
        return result


class FullSortEval(nn.Module):
    """``Trainer.evaluate`` on one full-sort batch: scores, the history masked, the top-k matrix, the metrics."""

    def __init__(self, topk=(1, 3, 5)):
        super().__init__()
        self.model = SASRec()
        self.tot_item_num = self.model.n_items
        self.topk = list(topk)
        self.metrics = [MRR(self.topk), NDCG(self.topk)]

    def forward(self, item_seq, item_seq_len, history_index, positive_u, positive_i):
        # Trainer._full_sort_batch_eval
        scores = self.model.full_sort_predict(item_seq, item_seq_len)
        scores = scores.view(-1, self.tot_item_num)
        scores[:, 0] = -np.inf
        if history_index is not None:
            scores[history_index] = -np.inf

        # Collector.eval_batch_collect
        data_struct = DataStruct()
        _, topk_idx = torch.topk(scores, max(self.topk), dim=-1)  # n_users x k
        pos_matrix = torch.zeros_like(scores, dtype=torch.int)
        pos_matrix[positive_u, positive_i] = 1
        pos_len_list = pos_matrix.sum(dim=1, keepdim=True)
        pos_idx = torch.gather(pos_matrix, dim=1, index=topk_idx)
        result = torch.cat((pos_idx, pos_len_list), dim=1)
        data_struct.update_tensor("rec.topk", result)

        # Evaluator.evaluate
        result_dict = OrderedDict()
        for metric in self.metrics:
            result_dict.update(metric.calculate_metric(data_struct))
        return scores, result_dict


def build_recbole_sasrec_eval():
    seeded(1512)
    item_seq = torch.tensor([[3, 5, 2, 0, 0, 0], [7, 1, 4, 9, 6, 0], [11, 2, 0, 0, 0, 0], [8, 8, 3, 10, 1, 5]])
    item_seq_len = torch.tensor([3, 5, 2, 6])
    history_index = (torch.tensor([0, 0, 1, 2, 3, 3]), torch.tensor([3, 5, 4, 11, 8, 10]))
    positive_u = torch.tensor([0, 1, 1, 2, 3])
    positive_i = torch.tensor([6, 2, 10, 7, 4])
    return FullSortEval().eval(), (item_seq, item_seq_len, history_index, positive_u, positive_i)
