"""The architecture as a test: every import inside src/trident points down the layer order that the
README's Architecture section lists, and no file or function outgrows a sitting's reading."""
import ast
import functools
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "trident"

# top to bottom; a package may import only packages on a lower line
ORDER = [
    ["__main__"], ["cli"], ["commands"], ["demo"], ["flow"], ["serve", "launch", "diagnose"], ["rehearse"], ["train"], ["evaluate"], ["infer", "plan"],
    ["checkpoint", "parallelize"], ["model", "curate"], ["parallel"], ["tasks", "data"], ["text"],
    ["config", "flops", "hardware", "__init__"],
]
LEVEL = {name: len(ORDER) - i for i, names in enumerate(ORDER) for name in names}


def package_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "trident":
        return None
    if parts[1:3] == ["parallel", "parallelize"]:
        return "parallelize"  # the builder sits above the model; the rest of parallel/ below it
    return parts[1] if len(parts) > 1 else "__init__"


@functools.lru_cache(maxsize=None)
def syntax_nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of a source file, parsed once for all the checks of this module."""
    return tuple(ast.walk(ast.parse(path.read_text(), str(path))))


def imported_modules(path: Path, module: str):
    for node in syntax_nodes(path):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(module.split(".")[: -node.level] + ([base] if base else []))
            yield node.lineno, base
            if base == "trident":
                yield from ((node.lineno, f"trident.{alias.name}") for alias in node.names)


def test_every_import_points_down():
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        module = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
        here = package_of(module)
        for line, target in imported_modules(path, module):
            there = package_of(target)
            if there is None or there == here:
                continue
            assert here in LEVEL and there in LEVEL, f"{path}:{line}: package {here} or {there} has no layer"
            if LEVEL[there] >= LEVEL[here]:
                wrong.append(f"{path.relative_to(SRC.parent)}:{line}: {here} imports {there}")
    assert not wrong, "imports pointing up or sideways:\n" + "\n".join(wrong)


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.lru_cache(maxsize=None)
def module_graph() -> dict[str, frozenset[str]]:
    """Every module of src/trident and the modules it imports, at top level or inside a function, or
    names in a string (a registry's table of modules to import is an import all the same)."""
    paths = {module_name(path): path for path in sorted(SRC.rglob("*.py"))}
    graph = {}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        targets = set()
        for node in syntax_nodes(path):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in paths:
                targets.add(node.value)
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
                names = [f"{base}.{alias.name}" for alias in node.names]
                targets.update([name for name in names if name in paths] or [base])
        graph[module] = frozenset(target for target in targets if target in paths and target != module)
    return graph


def import_circles(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while not group or group[-1] != node:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1:
                circles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(circles)


def test_no_import_circle():
    """No module reaches itself through imports, between packages or inside one: each circle is a
    name that belongs one level lower."""
    circles = import_circles(module_graph())
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(group) for group in circles)



def test_no_folder_holds_more_than_a_seventh_of_the_code():
    """A folder's own modules (its subpackages counted apart) hold at most 15% of src/trident's lines,
    so each room stays small enough to find one's way in."""
    lines = {path: path.read_text().count("\n") for path in SRC.rglob("*.py")}
    total = sum(lines.values())
    by_folder: dict[Path, int] = {}
    for path, count in lines.items():
        by_folder[path.parent] = by_folder.get(path.parent, 0) + count
    big = [f"{folder.relative_to(SRC.parent)}: {count} of {total} lines ({count / total:.0%})"
           for folder, count in sorted(by_folder.items()) if count > 0.15 * total]
    assert not big, "folders over 15% of the code:\n" + "\n".join(big)


def test_curate_top_level_stays_a_hall():
    """curate/ keeps its stage families in subpackages: at most 12 modules at its top level."""
    top = sorted(path.name for path in (SRC / "curate").glob("*.py"))
    assert len(top) <= 12, f"curate/ has {len(top)} top-level modules: {top}"


# curate/'s rooms, lowest first: a room imports only rooms before it (document, stage, droplog: "base")
CURATE_ROOMS = ["base", "read", "extract", "dedup", "filters", "decontaminate", "run", "samples"]


def test_curate_rooms_import_down():
    def room(module: str) -> str | None:
        parts = module.split(".")
        if parts[:2] != ["trident", "curate"] or len(parts) < 3:
            return None
        return "base" if parts[2] in ("document", "stage", "droplog", "compiled") else parts[2]

    wrong = []
    for module, targets in sorted(module_graph().items()):
        here = room(module)
        for target in sorted(targets):
            there = room(target)
            if here and there and here != there:
                assert here in CURATE_ROOMS and there in CURATE_ROOMS, f"{module} or {target}: no room in CURATE_ROOMS"
                if CURATE_ROOMS.index(there) > CURATE_ROOMS.index(here):
                    wrong.append(f"{module} ({here}) imports {target} ({there})")
    assert not wrong, "curate rooms importing up:\n" + "\n".join(wrong)

def test_files_and_functions_stay_small():
    big = []
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > 400:
            big.append(f"{path}: {text.count(chr(10))} lines")
        for node in syntax_nodes(path):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
                big.append(f"{path}:{node.lineno}: {node.name} has {node.end_lineno - node.lineno + 1} lines")
    assert not big, "\n".join(big)


def test_no_test_module_imports_another():
    """Shared helpers live in the fixtures modules (train_fixtures, eval_fixtures, hub_fixtures,
    distributed, conftest), so a test module can be read, run and changed on its own."""
    tests = Path(__file__).resolve().parent
    wrong = []
    for path in sorted(tests.glob("test_*.py")):
        for line, target in imported_modules(path, path.stem):
            if target.split(".")[0].startswith("test_") and target.split(".")[0] != path.stem:
                wrong.append(f"{path.name}:{line} imports {target}")
    assert not wrong, "\n".join(wrong)


# the model's internals: optimizer state, flat buffers, RNG streams (parallel/state.py is their interface)
INTERNAL_ATTRIBUTES = {"exp_avg", "exp_avg_sq", "master", "param_range", "separate_master", "main_grad", "ranges"}
MODEL_PARTS = {"optimizer", "buffers", "rng"}
INTERNAL_MODULES = {"trident.parallel.zero", "trident.parallel.data", "trident.parallel.optim",
                    # attention's and sharding's internals: the model calls parallel/attention.py, the rest parallelize
                    "trident.parallel.context", "trident.parallel.context_chunks", "trident.parallel.param_gather",
                    "trident.parallel.hybrid"}


def _ends_in_model(node: ast.AST) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return name == "model"


def test_only_parallel_touches_optimizer_and_buffer_internals():
    """Checkpoints, the trainer, HF import, rehearsal and tools see a ParallelModel only through
    state_pieces() / load_pieces() / state_bytes(): never its optimizer, buffers or RNG objects; the
    model reaches ring attention and chunk positions only through parallel/attention.py."""
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        module = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
        if module.startswith("trident.parallel."):
            continue
        for node in syntax_nodes(path):
            if isinstance(node, ast.Attribute) and (node.attr in INTERNAL_ATTRIBUTES or
                                                    (node.attr in MODEL_PARTS and _ends_in_model(node.value))):
                wrong.append(f"{path.relative_to(SRC.parent)}:{node.lineno}: .{node.attr}")
        wrong += [f"{path.relative_to(SRC.parent)}:{line}: imports {target}"
                  for line, target in imported_modules(path, module) if target in INTERNAL_MODULES]
    assert not wrong, "outside parallel/, reaching into the model's internals:\n" + "\n".join(wrong)
