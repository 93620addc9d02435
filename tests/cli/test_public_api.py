"""The public API is small and pinned."""

import inspect

import dynscope


def test_all_is_exactly_the_public_names() -> None:
    public = {n for n in dir(dynscope) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(dynscope, n)).__name__ == "module"}
    assert set(dynscope.__all__) == public - modules
    assert sorted(dynscope.__all__) == dynscope.__all__


def test_report_fields_match_the_design() -> None:
    rep = dynscope.Report()
    for name in ("graphs", "breaks", "recompiles", "guards", "frames", "compile_time", "coverage",
                 "timing", "graph_count", "break_count", "recompile_count"):
        assert hasattr(rep, name), name
    for name in ("summary", "to_json", "save", "check"):
        assert callable(getattr(rep, name)), name


def test_capture_takes_only_public_options() -> None:
    # report()'s own configuration (run counting, coverage marks) is a private subclass.
    assert list(inspect.signature(dynscope.Capture).parameters) == ["inner", "title", "provenance"]
    assert "Budget" in dynscope.__all__


def test_many_rank_names_are_public() -> None:
    # Issue 13: one report per rank, merged; the merged types are what merge() hands out.
    for name in ("save_rank", "merge", "MultiRankReport", "Divergence"):
        assert name in dynscope.__all__, name
    assert dynscope.merge.__module__ == "dynscope"
    assert (dynscope.Report().rank, dynscope.Report().world_size) == (0, 1)


def test_no_public_submodules_besides_the_plugin() -> None:
    # Implementation modules are private (underscored); the pytest plugin is an entry point
    # and ``watch`` a command (``python -m dynscope.watch script.py``).
    import pkgutil

    names = {m.name for m in pkgutil.iter_modules(dynscope.__path__)}
    assert {n for n in names if not n.startswith("_")} == {"pytest_plugin", "watch"}


def test_types_a_user_receives_are_exported() -> None:
    rep = dynscope.Report()
    received = {type(rep), type(rep.compile_time)}
    for name in ("Graph", "GraphBreak", "BreakEvent", "Recompile", "Guard", "Frame", "Coverage",
                 "Timing", "ModeTiming", "TensorMeta", "Node", "StackFrame", "CompileTime"):
        assert name in dynscope.__all__, name
    # Every dataclass reachable from Report's fields (Graph.lowering -> Kernel ...) and every
    # model type a Report method hands out is exported: found by walking the annotations.
    import dataclasses
    import typing

    import dynscope._model as _model

    seen: set[type] = set()
    todo: list[type] = [dynscope.Report]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        # Each class's hints resolve in its own module, as the codec reads them.
        hints = typing.get_type_hints(cls)
        for hint in hints.values():
            for arg in _flatten(hint):
                if dataclasses.is_dataclass(arg) and isinstance(arg, type) and arg.__module__.startswith("dynscope._model."):
                    todo.append(arg)
    seen.add(_model.RecompileGroup)  # handed out by Report.recompile_groups()
    missing = sorted(c.__name__ for c in seen if not c.__name__.startswith("_") and c.__name__ not in dynscope.__all__)
    assert not missing, f"model types a user receives but cannot import from dynscope: {missing}"
    assert all(t.__name__ in dynscope.__all__ for t in received)
    assert dynscope.CaptureError.__module__ == "dynscope"


def test_the_model_package_exports_every_model_type() -> None:
    # Code outside the model imports ``from dynscope._model import Report``: one __all__
    # names every public dataclass of the model's modules, each once.
    import dataclasses
    import importlib
    import pkgutil

    import dynscope._model as _model

    found = set()
    for info in pkgutil.iter_modules(_model.__path__):
        module = importlib.import_module(f"dynscope._model.{info.name}")
        for name, obj in vars(module).items():
            if (dataclasses.is_dataclass(obj) and isinstance(obj, type) and obj.__module__ == module.__name__
                    and not name.startswith("_")):
                found.add(name)
    assert found <= set(_model.__all__), sorted(found - set(_model.__all__))
    assert len(_model.__all__) == len(set(_model.__all__))
    assert all(hasattr(_model, n) for n in _model.__all__)


def _flatten(hint: object) -> list[object]:
    """A type hint and every type inside it (tuple[Kernel, ...] -> tuple, Kernel)."""
    import typing

    out = [hint]
    for arg in typing.get_args(hint):
        out.extend(_flatten(arg))
    return out
