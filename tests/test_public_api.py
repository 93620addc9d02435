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
    assert list(inspect.signature(dynscope.Capture).parameters) == ["inner", "title"]
    assert "Budget" in dynscope.__all__


def test_no_public_submodules_besides_the_plugin() -> None:
    # Implementation modules are private (underscored); the pytest plugin is an entry point.
    import pkgutil

    names = {m.name for m in pkgutil.iter_modules(dynscope.__path__)}
    assert {n for n in names if not n.startswith("_")} == {"pytest_plugin"}


def test_types_a_user_receives_are_exported() -> None:
    rep = dynscope.Report()
    received = {type(rep), type(rep.compile_time)}
    for name in ("Graph", "GraphBreak", "BreakEvent", "Recompile", "Guard", "Frame", "Coverage",
                 "Timing", "ModeTiming", "TensorMeta", "Node", "StackFrame", "CompileTime"):
        assert name in dynscope.__all__, name
    assert all(t.__name__ in dynscope.__all__ for t in received)
    assert dynscope.CaptureError.__module__ == "dynscope"
