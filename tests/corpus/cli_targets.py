"""Targets for `dynscope report package.module:function` tests."""

from tests.corpus.programs import MLP, _x


def clean():
    return MLP(), _x(4, 8)


def wrong_shape():
    return MLP()
