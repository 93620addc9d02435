"""One registry of PyTorch's trace record kinds (issue 33): dynscope._torch.records names them
all, and no other module spells one; every kind a recorded log holds is known to it or counted
as unknown."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from dynscope._model.cache import CacheLookup
from dynscope._torch import lowering_text as lt
from dynscope._torch import records
from dynscope._torch.metrics import CompileMetrics
from dynscope._torch.trace import TraceEvent, event_from
from dynscope._torch.trace_log import read_log

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "dynscope"
REGISTRY_FILE = PACKAGE / "_torch" / "records.py"
TRACES = ROOT / "tests" / "traces"

#: Kind names that are also plain words dynscope uses for something else: a report's
#: "torch_version" field, ``torch.export``'s name, the HTML page's links, Python's ``str``.
_ORDINARY_WORDS = frozenset({"torch_version", "export", "link", "str"})
#: Logs read whole below: plain Dynamo, a training loop under Inductor, a DDP rank, AOTInductor.
_LOGS = (
    "torch-2.11/logs/corpus-recompile_shape.log",
    "torch-2.14/logs/inductor-train.log",
    "torch-2.11/logs/ddp-2ranks/dedicated_log_torch_trace_rank_0___hqopzr.log",
    "torch-2.15/logs/aoti-export.log",
)
#: A record's first line, and its kind as the metadata spells it, read apart from dynscope's reader.
_RECORD = re.compile(r'^\S+ \S+ +\d+ [^\]]*\] \{"(?P<key>[^"]+)"(?:: \{"name": "(?P<name>[^"]+)")?')


def _kinds() -> frozenset[str]:
    return frozenset({*records.REGISTRY, records.ARTIFACT, records.GRAPH_DUMP}) - _ORDINARY_WORDS


def _docstrings(tree: ast.Module) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _spelled(value: str | bytes, kinds: frozenset[str]) -> list[str]:
    """The kinds ``value`` spells: as itself, or quoted inside it (a JSON key, a bytes prefix)."""
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    return [k for k in kinds if text == k or f'"{k}"' in text]


def test_no_module_but_the_registry_spells_a_record_kind() -> None:
    kinds = _kinds()
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == REGISTRY_FILE:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)) and id(node) not in docs:
                found += [f"{path.relative_to(ROOT)}:{node.lineno} {k}" for k in _spelled(node.value, kinds)]
    assert not found, "record kinds spelled outside dynscope/_torch/records.py:\n" + "\n".join(found)


def test_the_scan_sees_a_kind_spelled() -> None:
    kinds = _kinds()
    assert _spelled("compilation_metrics", kinds) == ["compilation_metrics"]
    assert _spelled(b'{"graph_dump"', kinds) == ["graph_dump"]
    assert _spelled("compilation metrics", kinds) == []
    assert _ORDINARY_WORDS <= set(records.REGISTRY)  # the exemptions are kinds, not a loophole


def test_every_kind_has_one_fate() -> None:
    kept = {records.ALWAYS, records.LOWERING, records.APART, records.SKIPPED}
    for kind in records.REGISTRY.values():
        assert kind.kept in kept and kind.where, kind
        assert kind.where[0] in (records.EVENT, records.IN_ARTIFACT, records.IN_GRAPH_DUMP), kind
        # a kept kind says what its readers read; parsers belong to kept kinds only
        assert (kind.parser is not None) == (kind.kept in (records.ALWAYS, records.LOWERING)), kind
        assert records.kept_kind(kind.name, lowering=True) == (kind.kept in (records.ALWAYS, records.LOWERING))
        assert records.kept_kind(kind.name) == (kind.kept == records.ALWAYS)
    assert records.NAME_ONLY == frozenset()
    # cache keys' 70 KB cut to their parts on arrival; an inductor_compile step's copy of them dropped
    assert records.COMPACTED == {*records.CACHE_RESULTS, records.CHROMIUM_EVENT}
    assert records.USER_STACK_ONLY == {records.CREATE_SYMBOL, records.SYMBOLIC_SHAPE_SPECIALIZATION,
                                       records.GUARD_ADDED_FAST}
    assert records.READ_APART == {records.STR, records.TORCH_VERSION}


@pytest.mark.parametrize("name", _LOGS)
def test_every_kind_in_a_recorded_log_is_known_or_counted(name: str) -> None:
    path = TRACES / name
    seen: Counter[str] = Counter()
    in_container: set[str] = set()
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        m = _RECORD.match(line)
        if m is None:
            continue
        container = m["key"] in (records.ARTIFACT, records.GRAPH_DUMP)
        kind = (m["name"] or "") if container else m["key"]
        seen[kind] += 1
        if container:
            in_container.add(kind)
    log = read_log(path)
    unknown = {k: n for k, n in seen.items() if k not in records.REGISTRY and k not in in_container}
    for kind, n in seen.items():
        label = records.unknown_kind(kind)
        if kind in unknown:
            assert log.unreadable[label] == n, (kind, n, log.unreadable)
        else:
            assert label not in log.unreadable, kind
    # what was kept is what the registry keeps, each kept record an event (chromium: its steps)
    events = Counter(ev.name for ev in log.events)
    assert set(events) <= {k for k in records.REGISTRY if records.kept_kind(k, lowering=True)}
    for kind, n in events.items():
        assert n == seen[kind] or (kind == records.CHROMIUM_EVENT and n <= seen[kind]), (kind, n, seen[kind])
    assert seen[records.COMPILATION_METRICS] == events[records.COMPILATION_METRICS] > 0


def _stored_events(version: str) -> list[TraceEvent]:
    """The kept events of a release's stored traces: Dynamo's (``*.jsonl``) and Inductor's
    (``lowering/*.json``)."""
    found = [json.loads(line) for path in sorted((TRACES / version).glob("*.jsonl"))
             for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for path in sorted((TRACES / version / "lowering").glob("*.json")):
        found += json.loads(path.read_text(encoding="utf-8"))["records"]
    return [ev for r in found if (ev := event_from(r["metadata"], r["payload"], lowering=True)) is not None]


def test_each_kept_kind_parses_into_what_its_readers_read() -> None:
    events = _stored_events("torch-2.14")
    by_kind = Counter(ev.name for ev in events)
    assert by_kind[records.CREATE_SYMBOL] and by_kind[records.DYNAMO_GRAPH_BREAK_REASON]
    assert by_kind[records.INDUCTOR_OUTPUT_CODE] and by_kind[records.PROVENANCE_NODE_MAPPINGS]
    assert any(by_kind[k] for k in records.CACHE_RESULTS)
    mapped = 0  # provenance records that map nodes (a backward compile's maps none)
    for ev in events:
        parsed = records.parse(ev)
        if ev.name == records.COMPILATION_METRICS:
            assert isinstance(parsed, CompileMetrics)
        elif ev.name == records.CREATE_SYMBOL:
            assert isinstance(parsed, records.CreatedSymbol) and parsed.symbol == ev.metadata["symbol"]
            val = str(ev.metadata.get("val", ""))
            assert parsed.value == (int(val) if val.lstrip("-").isdigit() else None)
            assert "stack" not in ev.metadata  # only the user's frames are kept
        elif ev.name == records.DYNAMO_GRAPH_BREAK_REASON:
            assert parsed is not None, ev.payload[:200]
        elif ev.name in records.CACHE_RESULTS:
            assert isinstance(parsed, CacheLookup) and (parsed.cache, parsed.result) == records.CACHE_RESULTS[ev.name]
        elif ev.name == records.PROVENANCE_NODE_MAPPINGS:
            assert isinstance(parsed, lt.Provenance)
            mapped += bool(parsed.post_to_pre)
        elif ev.name == records.CHROMIUM_EVENT:
            assert parsed is not None  # only steps' begins and ends are kept
        elif ev.name in records.AOT_GRAPHS:
            assert isinstance(parsed, lt.GraphText) and parsed.nodes
    assert mapped


def test_unknown_kinds_are_counted_and_container_names_are_not() -> None:
    assert records.is_unknown("brand_new_record", in_container=False)
    assert not records.is_unknown("brand_new_artifact", in_container=True)
    assert not records.is_unknown("describe_tensor", in_container=False)  # skipped on purpose
    assert not records.is_unknown(records.CHROMIUM_EVENT, in_container=False)


# -- records parsed once, folded through handler tables (issue 46 part 1) ---------------------

def _metrics_script():  # a module loaded from scripts/
    spec = importlib.util.spec_from_file_location("architecture_metrics", ROOT / "scripts" / "architecture_metrics.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: ``ev.name == ...``, ``.name in records.``, ``raw.kind != ...``: a record's kind tested by name.
_NAME_TEST = re.compile(r"\b(?:ev|event|raw)\.(?:name|kind)\s*(?:==|!=|in\b|not in\b)|\.name\s+(?:not\s+)?in\s+records\.")


def test_no_module_but_the_registry_tests_a_record_kind() -> None:
    # What happens to each kind is decided by a lookup in a handler table (assemble's _FIRST and
    # _HANDLERS, lowering's _HANDLERS, trace_log's _READ_APART, the watch's _at_kind), never
    # by a comparison: the script's figure ...
    assert _metrics_script().kind_tests(ROOT) == []
    # ... and a plain grep agree.
    found = [
        f"{path.relative_to(ROOT)}:{n} {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py")) if path != REGISTRY_FILE
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if _NAME_TEST.search(line)
    ]
    assert not found, "record kinds tested outside dynscope/_torch/records.py:\n" + "\n".join(found)


def test_the_kind_test_scan_sees_one(tmp_path: Path) -> None:
    (tmp_path / "dynscope").mkdir()
    (tmp_path / "dynscope" / "m.py").write_text(
        "from dynscope._torch.records import AOT_GRAPHS\n"
        "def f(ev, name, kind):\n"
        "    a = ev.name == records.DYNAMO_START\n"
        "    b = name in records.NAME_ONLY\n"
        "    c = kind in (records.ARTIFACT, records.GRAPH_DUMP)\n"
        "    d = ev.name in _SOME\n"
        "    e = name in AOT_GRAPHS\n"
        "    f = kind == 'compilation_metrics'\n"
        "    return _HANDLERS.get(ev.name), records.REGISTRY[ev.name].payload\n",
        encoding="utf-8",
    )
    assert _metrics_script().kind_tests(tmp_path) == [f"dynscope/m.py:{n}" for n in range(3, 9)]
    assert _NAME_TEST.search("if ev.name == records.X:") and _NAME_TEST.search("x.name in records.AOT_GRAPHS")
    assert not _NAME_TEST.search("handler = _HANDLERS.get(ev.name)")


def test_each_event_is_parsed_once_through_its_kinds_parser() -> None:
    log = read_log(TRACES / "torch-2.14" / "logs" / "inductor-train.log")
    calls: Counter[str] = Counter()
    originals = {name: kind.parser for name, kind in records.REGISTRY.items()}
    try:
        for kind in records.REGISTRY.values():
            if kind.parser is not None:
                parser = kind.parser
                object.__setattr__(kind, "parser", lambda ev, parser=parser: (calls.update([ev.name]), parser(ev))[1])
        for ev in log.events:
            first, again = ev.record, ev.record
            assert first is again
        assert sum(calls.values()) == len(log.events)
        assert {ev.name for ev in log.events} == set(calls)
    finally:
        for name, kind in records.REGISTRY.items():
            object.__setattr__(kind, "parser", originals[name])
    metrics = [ev.record for ev in log.events if isinstance(ev.record, CompileMetrics)]
    assert metrics and all(m.pytorch_version.startswith("2.14") for m in metrics)
