"""The shape the code keeps: no import circles, one owner of torch's step hooks, files of
one idea, the step boundary's order.

The import graph counts every import in a module, at module level, inside functions and
under ``TYPE_CHECKING`` alike: a circle hidden in a function or a type annotation is
still a circle a reader has to untangle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from jupyterlab_torchdbg.kernel import step_boundary

PACKAGE = Path(__file__).parents[1] / "jupyterlab_torchdbg"
ROOT = PACKAGE.parent
#: Longest module of the package, in lines (one idea per file).
MAX_KERNEL_LINES = 400


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        if "labextension" in path.parts:
            continue
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = _resolve(name, is_package, node.level, node.module)
                else:
                    base = node.module or ""
                targets = [f"{base}.{a.name}" for a in node.names]
                # ``from . import x`` in a package's own module: the package is already
                # being imported (its parent), not a dependency.
                if not name.startswith(base + "."):
                    targets.append(base)
            for t in targets:
                if t in modules and t != name:
                    graph[name].add(t)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle, as the list of modules around it, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return [*stack[stack.index(n) :], n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_the_cycle_finder_finds_a_circle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_circles_in_the_package() -> None:
    graph = import_graph()
    assert "jupyterlab_torchdbg.kernel.step_boundary" in graph
    assert graph["jupyterlab_torchdbg.kernel.extension"]  # the graph sees real imports
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])


def test_features_never_import_the_extension() -> None:
    graph = import_graph()
    for name, deps in graph.items():
        if ".kernel." in name and not name.endswith((".extension", ".scalars", ".grads.api")):
            assert "jupyterlab_torchdbg.kernel.extension" not in deps, name


#: The kernel's features: each a package that ``extension.py`` wires to the others.
FEATURES = ("grads", "memory", "exceptions", "control", "record", "export")
#: The one module-level instance that stays: the extension IPython's ``%load_ext`` loads
#: (the root of the wiring), and its getter.
KEPT_INSTANCES = {
    ("jupyterlab_torchdbg.kernel.extension", "_current"),
    ("jupyterlab_torchdbg.kernel.extension", "current"),
}
#: What a feature is or holds (its monitor, its stream, its hub, a watch of its state):
#: classes of the package named so are handed over by the wiring, never kept in a global.
#: (torch's process-wide hook registries, ``HOOKS`` and the like, are no feature's.)
WIRED_SUFFIXES = ("Monitor", "Extension", "Host", "Stream", "Hub", "Watch", "Replayer", "Guard")


def _feature(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] == ["jupyterlab_torchdbg", "kernel"] and len(parts) > 2:
        return parts[2] if parts[2] in FEATURES else None
    return None


def test_features_import_no_other_feature() -> None:
    """A feature gets what it needs of another from ``extension.py``'s wiring; code two
    features share lives in a neutral module (``units.py``, ``oom_text.py``, ...)."""
    crossings = sorted(
        f"{name} -> {dep}"
        for name, deps in import_graph().items()
        if (own := _feature(name)) is not None
        for dep in deps
        if _feature(dep) not in (None, own)
    )
    assert crossings == []


def _wired_classes() -> set[str]:
    return {
        node.name
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef) and node.name.endswith(WIRED_SUFFIXES)
    }


def module_level_instances(source: str, classes: set[str]) -> list[str]:
    """Module-level names that hold an instance of ``classes`` or a weak map (a service
    locator: a feature found through a global instead of being handed it), and
    argument-less ``current*`` functions (the locator's getter)."""
    found: list[str] = []
    weak = {"WeakKeyDictionary", "WeakValueDictionary"}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name.startswith("current") and not node.args.args:
                found.append(node.name)
            continue
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            targets, parts = [node.target.id], [node.annotation, node.value]
        elif isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
            parts = [node.value]
        else:
            continue
        names = {
            n.id if isinstance(n, ast.Name) else n.attr
            for part in parts
            if part is not None
            for n in ast.walk(part)
            if isinstance(n, (ast.Name, ast.Attribute))
        }
        if names & (classes | weak):
            found += targets
    return found


def test_the_locator_finder_finds_a_module_level_monitor() -> None:
    classes = {"GradMonitor", "LossWatch"}
    src = (
        "import weakref\n"
        "_monitor: GradMonitor | None = None\n"
        "_watches: weakref.WeakKeyDictionary[Stream, LossWatch] = weakref.WeakKeyDictionary()\n"
        "_cache = weakref.WeakValueDictionary()\n"
        "LIMIT = 3\n"
        "def current_monitor() -> GradMonitor | None:\n    return _monitor\n"
        "def current_run(ext: object) -> int:\n    return 0\n"
    )
    assert module_level_instances(src, classes) == [
        "_monitor",
        "_watches",
        "_cache",
        "current_monitor",
    ]


def test_no_service_locators_in_the_kernel() -> None:
    """No feature keeps a module-level instance (``_monitor``, a weak map keyed by the
    stream) or a ``current_monitor()``: ``extension.py`` hands each feature what it needs,
    and tests reach a feature through the loaded extension (``testing.grad_monitor``)."""
    classes = _wired_classes()
    assert {"GradMonitor", "MemoryMonitor", "ExceptionMonitor", "LossWatch"} <= classes
    found = {
        (name, target)
        for name, path in _modules().items()
        if name.startswith("jupyterlab_torchdbg.kernel")
        for target in module_level_instances(path.read_text(encoding="utf-8"), classes)
    }
    assert found - KEPT_INSTANCES == set()


def test_one_registration_site_for_torchs_step_hooks() -> None:
    sites = []
    for name, path in _modules().items():
        text = path.read_text(encoding="utf-8")
        for hook in ("register_optimizer_step_pre_hook", "register_optimizer_step_post_hook"):
            if f"{hook}(" in text:
                sites.append((name, hook))
    assert sorted({s for s, _ in sites}) == ["jupyterlab_torchdbg.kernel.step_boundary"]


def test_one_registration_site_for_the_end_of_backward_hooks() -> None:
    """The end of backward (loops without torch.optim) is hooked in backward_boundary.py
    only, which the step boundary owns: it calls the features in the same ORDER. The one
    other engine callback, grads/backward_root.py, is no step boundary: it only records
    which tensor ``backward()`` was called on (the loss, R47) and calls no feature."""
    sites = set()
    for name, path in _modules().items():
        text = path.read_text(encoding="utf-8")
        for hook in ("register_post_accumulate_grad_hook(", "queue_callback", "_execution_engine"):
            if hook in text:
                sites.add(name)
    root = "jupyterlab_torchdbg.kernel.grads.backward_root"
    assert sorted(sites) == ["jupyterlab_torchdbg.kernel.backward_boundary", root]
    assert "register_post_accumulate_grad_hook(" not in _modules()[root].read_text("utf-8")
    graph = import_graph()
    assert graph[root] <= {"jupyterlab_torchdbg.kernel.grads.bad_step"}, graph[root]
    users = sorted(
        m for m, deps in graph.items() if "jupyterlab_torchdbg.kernel.backward_boundary" in deps
    )
    # the step boundary owns it (and, in a worker process of a multi-process job,
    # ranks/worker/manual.py); the others only read its ModelSource (a track's key)
    assert "jupyterlab_torchdbg.kernel.step_boundary" in users
    assert set(users) <= {
        "jupyterlab_torchdbg.kernel.step_boundary",
        "jupyterlab_torchdbg.ranks.worker.manual",
        "jupyterlab_torchdbg.ranks.worker.boundary",
        "jupyterlab_torchdbg.ranks.worker.reader",  # a ModelSource's model names the layers
        "jupyterlab_torchdbg.kernel.grads.naming",
        "jupyterlab_torchdbg.kernel.grads.track",
        "jupyterlab_torchdbg.kernel.grads.monitor",
        "jupyterlab_torchdbg.kernel.grads.per_run",  # a source handed over to an optimizer
        "jupyterlab_torchdbg.kernel.grads.loop_clip",  # a source's own clip, kept on it
        "jupyterlab_torchdbg.kernel.control.controller",
        "jupyterlab_torchdbg.kernel.control.lr",  # a ModelSource target has no lr
    }, users


def test_package_files_hold_one_idea() -> None:
    """Every module of the package (the kernel side, the ranks package, the bench), the
    generated protocol types excepted."""
    generated = PACKAGE / "protocol" / "messages.py"
    long = {
        str(p.relative_to(ROOT)): n
        for p in PACKAGE.rglob("*.py")
        if "labextension" not in p.parts and p != generated
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_KERNEL_LINES
    }
    assert long == {}


# --- the step boundary's order --------------------------------------------------------


def test_step_boundary_calls_grads_then_control_then_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The order step_boundary.py's docstring gives: the monitor reads the norms before
    clipping, control clips with exactly those norms, memory runs after the step."""
    from grads_support import session

    # runs first: which run the step belongs to (runs.py), then the order below
    assert step_boundary.ORDER == ("runs", "grads", "control", "memory")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    calls: list[tuple[str, int]] = []
    with session({"model": model, "opt": opt}) as s:
        ext = s.ext
        assert ext.grads is not None and ext.control is not None and ext.memory is not None
        grads, control, memory = ext.grads, ext.control, ext.memory
        real_read, real_control, real_memory = grads.on_step, control.at_step, memory.after_step
        seen_norms: list[float] = []
        pre_clip: list[float] = []
        after_step: list[float] = []

        def read(optimizer: object) -> object:
            r = real_read(optimizer)
            calls.append(("grads", r.step if r is not None else -1))
            if r is not None and r.norms is not None:
                seen_norms.append(float(torch.linalg.vector_norm(r.norms)))
            return r

        def act(optimizer: object, r: object) -> None:
            calls.append(("control", getattr(r, "step", -1)))
            grads_now = [p.grad for p in model.parameters() if p.grad is not None]
            pre_clip.append(float(torch.nn.utils.get_total_norm(grads_now)))
            real_control(optimizer, r)

        def mem(optimizer: object) -> None:
            calls.append(("memory", calls[-1][1]))
            grads_now = [p.grad for p in model.parameters() if p.grad is not None]
            after_step.append(float(torch.nn.utils.get_total_norm(grads_now)))
            real_memory(optimizer)

        monkeypatch.setattr(grads, "on_step", read)
        monkeypatch.setattr(control, "at_step", act)
        monkeypatch.setattr(memory, "after_step", mem)
        assert s.comm.action("set_stride", {"stride": 50})["method"] == "ack"
        assert s.comm.action("clip", {"max_norm": 1e-3})["method"] == "ack"
        reused = control.clipper.reused
        g = torch.Generator().manual_seed(0)
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(8, 6, generator=g)).pow(2).mean().backward()
            opt.step()
        s.end_cell()
    assert [c for c, _ in calls] == ["grads", "control", "memory"] * 3
    assert [n for _, n in calls] == [1, 1, 1, 2, 2, 2, 3, 3, 3]
    # the monitor read every step (clipping is on, despite stride 50), before clipping...
    assert len(seen_norms) == 3
    assert seen_norms == pytest.approx(pre_clip, rel=1e-6)
    # ...control clipped with that read (no second read of the gradients)...
    assert control.clipper.reused == reused + 3
    # ...and memory ran after the step, seeing the clipped gradients.
    assert all(a == pytest.approx(1e-3, rel=1e-3) for a in after_step)
    assert all(b > 1e-2 for b in pre_clip)


def _files_section(doc: str) -> str:
    """A package docstring's list of its files: from "Files" to the first paragraph after
    it that is not a list item."""
    paragraphs = doc[doc.index("Files") :].split("\n\n")
    keep = [paragraphs[0]]
    for p in paragraphs[1:]:
        if not p.lstrip().startswith("- "):
            break
        keep.append(p)
    return "\n\n".join(keep)


def test_a_package_docstring_names_every_module_and_no_missing_one() -> None:
    """A package's docstring that lists its files (``Files``) names every module it holds
    and none that is gone (kernel/grads listed a ``watch`` module that no longer was);
    a name followed by a parenthesis (its description) must be a module: the others are
    messages and functions."""
    import ast
    import re

    root = Path(__file__).parent.parent / "jupyterlab_torchdbg"
    checked = 0
    for init in sorted(root.rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        if "Files" not in doc:
            continue
        modules = {p.stem for p in init.parent.glob("*.py")} - {"__init__"}
        modules |= {p.name for p in init.parent.iterdir() if (p / "__init__.py").exists()}
        files = _files_section(doc)
        named = set(re.findall(r"``([a-z_][a-z0-9_]*)``", files))
        described = set(re.findall(r"``([a-z_][a-z0-9_]*)`` \(", files))
        assert modules <= named, (str(init), sorted(modules - named))
        assert described <= modules, (str(init), sorted(described - modules))
        checked += 1
    assert checked >= 5


def test_one_owner_of_ipythons_cell_events() -> None:
    """Only kernel/extension.py registers IPython's cell events; every feature's handler
    (ranks' included) is called from there, in the order written there."""
    sites = {
        name
        for name, path in _modules().items()
        if "events.register(" in path.read_text(encoding="utf-8")
    }
    assert sites == {"jupyterlab_torchdbg.kernel.extension"}
