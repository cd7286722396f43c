"""torch.export programs (`.pt2`, `torch.save`'s successor for deployment, which TorchScript's deprecation
points to): `torch.export.load`, then the program's module. Its input's static height and width are the
model's own input size and its output's width the class count. A program exported with a fixed batch
size runs in batches of that size (the last one padded), so any batch the audit hands it works.

`torch.export.load` runs code from the file in four places: the pickles it reads (sample inputs, pickled
weights and constants, the legacy state dicts: unpickled in full when torch's weights-only reader refuses
them), AOTInductor's compiled libraries, the shape expressions of the program's JSON (`sympy.sympify`, an
`eval`) and its guards (`exec`, when the program's module is built). The archive is checked for each before
torch reads it; a program with any is refused unless the caller trusts it (`--trust-pickled-model-code`).
The graph's call targets are torch's verifier's to check (operators only)."""

from __future__ import annotations

import ast
import io
import json
import logging
import re
import tokenize
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from macs_audit.errors import InputError
from macs_audit.models import config as model_config
from macs_audit.models.sources import TORCH_EXPORT, LoadSettings

ORIGIN = "exported program"

# The members torch.export.load unpickles: sample inputs, the weights and constants not listed as raw bytes,
# and the state dicts of the legacy (`data/weights/model.pt`) and 2.7 (`serialized_*.pt`) formats.
PICKLED_FOLDERS = ("data/weights/", "data/constants/", "data/sample_inputs/")
COMPILED_FOLDER = "data/aotinductor/"  # shared libraries torch.export.load loads (dlopen)
# Names a shape expression may use (sympy.sympify's eval sees sympy's and Python's builtins): sympy's
# arithmetic and torch's shape functions (torch._export.serde's deserializer); symbols (s0, u1) become
# Symbols, keyword names (positive=True) stay arguments of Symbol.
SHAPE_FUNCTIONS = frozenset(
    "Symbol Integer Float Rational Add Mul Max Min Mod Abs floor ceiling Eq Ne Lt Le Gt Ge And Or Not "
    "oo zoo nan True False true false FloorDiv ModularIndexing Where PythonMod CleanDiv CeilToInt FloorToInt "
    "CeilDiv LShift RShift PowByNatural FloatPow FloatTrueDiv IntTrueDiv IsNonOverlappingAndDenseIndicator "
    "TruncToFloat TruncToInt RoundToInt RoundDecimal ToFloat Identity".split()
)
SHAPE_OPERATORS = frozenset("+ - * / // % ** ( ) , = < > <= >= == != & | ~".split())
# What a guard (Python code torch execs when the program's module is built) may use: the inputs' sizes
# (`L['x'].size()[3] // 2 != 1`), torch's size functions (`torch.sym_max`) and math's.
GUARD_NAMES = frozenset({"L", "inf", "math", "torch"})
GUARD_ATTRIBUTES = frozenset({"size", "stride", "storage_offset", "dim", "numel", "shape"})
GUARD_FUNCTIONS = {
    "math": frozenset({"floor", "ceil", "trunc", "sqrt", "inf"}),
    "torch": frozenset({"sym_max", "sym_min", "sym_float", "sym_int", "sym_not", "sym_ite", "sym_sum"}),
}
SMALL_EXPONENT = 64  # a literal power beyond this is a way to hang the parser, not a shape


def code_in_program(path: Path) -> tuple[str, str] | None:
    """(what, where): the first thing in the `.pt2` archive at `path` that would run code when torch.export.load
    reads it or its program runs, and the archive member it is in; None when nothing would. Nothing in the
    archive is unpickled in full, imported or evaluated. A damaged archive is an InputError."""
    damaged = f"cannot load torch.export program {path}: the archive is damaged"
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            # torch's archive reader names members without their first folder (the archive's own name)
            members = {info.filename.split("/", 1)[-1]: info for info in infos}
            if len(members) != len(infos):
                raise InputError(f"{damaged} (two members share a name)")
            raw = _raw_payloads(zf, members, damaged)
            for name, info in members.items():
                if name.startswith(COMPILED_FOLDER):
                    return "AOTInductor compiled code", name
                if name.endswith(".json"):
                    found = _code_in_json(zf.read(info), f"{damaged} ({name} is not valid JSON)")
                elif name.endswith(".pt") or (name.startswith(PICKLED_FOLDERS) and name not in raw):
                    found = _unsafe_pickle(zf.read(info), f"cannot load torch.export program {path}: {name}")
                else:
                    continue
                if found is not None:
                    return found, name
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as exc:  # NotImplemented: a compression
        from macs_audit.models.backend import one_line

        raise InputError(f"{damaged} ({one_line(exc)})") from None
    return None


def _raw_payloads(zf: zipfile.ZipFile, members: dict[str, zipfile.ZipInfo], damaged: str) -> set[str]:
    """The weight and constant members the archive's configs list as raw tensor bytes only (torch reads them
    with `torch.as_strided`, never unpickles them)."""
    raw: set[str] = set()
    pickled: set[str] = set()
    for name, info in members.items():
        if not name.endswith(("_weights_config.json", "_constants_config.json")):
            continue
        folder = name.rsplit("/", 1)[0] + "/"
        try:
            entries = json.loads(zf.read(info))["config"].values()
            for entry in entries:
                file_name = entry["path_name"]
                if not isinstance(file_name, str) or not re.fullmatch(r"[\w.-]+", file_name) or ".." in file_name:
                    raise InputError(f"{damaged} ({name} names the member {str(file_name)[:80]!r})")
                plain = entry.get("use_pickle") is False and not file_name.startswith(("custom_obj_", "opaque_obj_"))
                (raw if plain else pickled).add(folder + file_name)
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            raise InputError(f"{damaged} ({name} is not a payload config)") from None
    return raw - pickled


def _unsafe_pickle(data: bytes, unreadable: str) -> str | None:
    """The object a pickled member names that torch's weights-only reader refuses (torch then unpickles it in
    full, which runs code); None when that reader reads it, tensors and containers only."""
    import pickle

    import torch

    from macs_audit.models.backend import one_line
    from macs_audit.models.torch import _globals_of_pickles

    try:
        torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # the weights-only reader's refusal, or bytes that are no torch file
        text = one_line(exc)
        refused = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text)
        if refused:
            return refused.group(1)
        if not isinstance(exc, pickle.UnpicklingError) and "weights only load failed" not in text.lower():
            raise InputError(f"{unreadable} is no tensor file torch can read ({text})") from None
        named = _globals_of_pickles(io.BufferedReader(io.BytesIO(data)), count=1) or []  # type: ignore[arg-type]
        return next((g for g in named if not g.startswith(("torch.", "collections."))), None) or (
            "an object the weights-only reader refuses"
        )
    return None


def _code_in_json(data: bytes, damaged: str) -> str | None:
    """The first shape expression or guard of a program's JSON that is not plain arithmetic on sizes; None
    when every one is. (Its call targets are torch's verifier's to check: operators only.)"""
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        raise InputError(damaged) from None
    for key, value in _json_items(document):
        if key == "expr_str" and not _plain_shape_expression(value):
            return f"the shape expression {_quoted(value)}"
        if key == "guards_code" and isinstance(value, list):
            for guard in value:
                if not _plain_guard(guard):
                    return f"the guard {_quoted(guard)}"
    return None


def _json_items(document: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) of a JSON document, depth first, without recursion (the nesting is the file's)."""
    stack = [document]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                yield key, value
                stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)


def _quoted(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _plain_shape_expression(expr: object) -> bool:
    """Whether `expr` is arithmetic on symbols and numbers that sympy.sympify can only evaluate as such: no
    attribute, subscript or lambda, names from SHAPE_FUNCTIONS, symbols, keyword names, small literal powers."""
    if not isinstance(expr, str) or len(expr) > 10_000:
        return False
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(expr).readline) if t.string.strip()]
    except (tokenize.TokenError, SyntaxError):
        return False
    return all(_plain_token(tokens, index) for index in range(len(tokens)))


def _plain_token(tokens: list[tokenize.TokenInfo], index: int) -> bool:
    """Whether the token at `index` is one a plain shape expression may hold (`_plain_shape_expression`)."""
    token = tokens[index]
    if token.type == tokenize.NAME:
        following = tokens[index + 1].string if index + 1 < len(tokens) else ""
        keyword = following == "=" and re.fullmatch(r"[a-z]+", token.string) is not None
        return bool(token.string in SHAPE_FUNCTIONS or re.fullmatch(r"[a-z]+\d+", token.string) or keyword)
    if token.type == tokenize.NUMBER:
        return re.fullmatch(r"\d+(\.\d+)?(e[+-]?\d+)?", token.string) is not None and len(token.string) <= 40
    if token.type == tokenize.STRING:  # Symbol('s0'), Float('0.5')
        return re.fullmatch(r"'([A-Za-z_]\w*|\d+(\.\d+)?(e[+-]?\d+)?)'", token.string) is not None
    if token.type == tokenize.OP:
        return token.string in SHAPE_OPERATORS and (token.string != "**" or _small_power(tokens, index))
    return token.type == tokenize.ENDMARKER


def _small_power(tokens: list[tokenize.TokenInfo], index: int) -> bool:
    """Whether the `**` at `index` raises to a literal integer up to SMALL_EXPONENT or to a symbol, and that
    exponent is not itself raised."""
    if index + 1 >= len(tokens) or (index + 2 < len(tokens) and tokens[index + 2].string == "**"):
        return False
    exponent = tokens[index + 1]
    if exponent.type == tokenize.NAME:
        return re.fullmatch(r"[a-z]+\d+", exponent.string) is not None
    return exponent.string.isascii() and exponent.string.isdigit() and int(exponent.string) <= SMALL_EXPONENT


def _module_of_attribute(name: ast.Name, tree: ast.AST) -> bool:
    return any(isinstance(node, ast.Attribute) and node.value is name for node in ast.walk(tree))


def _plain_guard(guard: object) -> bool:
    """Whether a guard is a comparison of the inputs' sizes (`L['x'].size()[0] >= 2`) that torch's exec can
    only evaluate as such: names, attributes and calls from GUARD_NAMES, GUARD_ATTRIBUTES and GUARD_FUNCTIONS."""
    if not isinstance(guard, str) or len(guard) > 10_000:
        return False
    try:
        tree = ast.parse(guard, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    plain: tuple[type[ast.AST], ...] = (ast.Expression, ast.Compare, ast.BoolOp, ast.UnaryOp, ast.BinOp, ast.Load)
    plain += (ast.Subscript, ast.Call, ast.cmpop, ast.boolop, ast.unaryop, ast.operator, ast.Name, ast.Attribute)
    plain += (ast.Constant,)
    for node in ast.walk(tree):
        if not isinstance(node, plain) or isinstance(node, (ast.MatMult, ast.Pow)):
            return False
        if isinstance(node, ast.Name) and node.id not in GUARD_NAMES:
            return False
        if isinstance(node, ast.Name) and node.id in GUARD_FUNCTIONS and not _module_of_attribute(node, tree):
            return False  # `math` and `torch` only as the module of one of their size functions
        if isinstance(node, ast.Attribute):
            module = node.value.id if isinstance(node.value, ast.Name) else ""
            if node.attr not in GUARD_FUNCTIONS.get(module, GUARD_ATTRIBUTES):
                return False
        if isinstance(node, ast.Call) and (node.keywords or not isinstance(node.func, (ast.Name, ast.Attribute))):
            return False
        # torch pastes the guard's text into a string literal of the code it execs: no quotes but an input's name
        if isinstance(node, ast.Constant) and not (
            isinstance(node.value, (int, float, bool))
            or (isinstance(node.value, str) and re.fullmatch(r"[A-Za-z_]\w*", node.value))
        ):
            return False
    return True


def _static(dim: Any) -> int | None:
    return dim if isinstance(dim, int) else None


def program_shapes(program: Any) -> tuple[list[int | None], list[int | None]]:
    """The (input, output) shapes of an ExportedProgram's one user input and first output (None: dynamic)."""
    user_inputs = [
        spec.arg.name
        for spec in program.graph_signature.input_specs
        if spec.kind.name == "USER_INPUT" and hasattr(spec.arg, "name")
    ]
    nodes = {node.name: node for node in program.graph.nodes}
    if len(user_inputs) != 1:
        raise InputError(f"expected a program with one image input, found {len(user_inputs)} inputs")
    value = nodes[user_inputs[0]].meta.get("val")
    output = next(node for node in program.graph.nodes if node.op == "output")
    first = output.args[0][0] if output.args and output.args[0] else None
    out_value = first.meta.get("val") if first is not None and hasattr(first, "meta") else None

    def shape(v: Any) -> list[int | None]:
        return [_static(d) for d in v.shape] if v is not None and hasattr(v, "shape") else []

    return shape(value), shape(out_value)


def program_module(module: Any, batch: int | None) -> Any:
    """The program's module as the predictor runs it: any batch size when it was exported for `batch` images
    (chunks of `batch`, the last padded); train()/eval() not passed to it (an exported module refuses them; it
    runs as exported)."""
    import torch

    class Program(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module):
            super().__init__()
            self.inner = inner

        def train(self, mode: bool = True) -> Program:
            self.training = mode
            return self

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if batch is None:
                return self.inner(x)
            outs = []
            for start in range(0, x.shape[0], batch):
                chunk = x[start : start + batch]
                real = chunk.shape[0]
                if real < batch:
                    chunk = torch.cat([chunk, chunk[-1:].expand(batch - real, *chunk.shape[1:])])
                outs.append(self.inner(chunk)[:real])
            return torch.cat(outs)

    return Program(module)


def load_exported_program(path: Path, settings: LoadSettings, allow_unsafe_pickle: bool = False) -> Any:
    """The program at `path` as a TorchPredictor; a program with anything that runs code when loaded or run
    (code_in_program) is refused unless `allow_unsafe_pickle`."""
    import torch

    from macs_audit.models.backend import library_warnings, one_line
    from macs_audit.models.torch import UNSAFE_FLAG, TorchPredictor

    if not zipfile.is_zipfile(path):
        raise InputError(f"cannot load torch.export program {path}: not a .pt2 archive (damaged or another file)")
    debug = settings.debug
    with library_warnings(debug):  # the weights-only reader's notes on the pickles it reads
        found = None if allow_unsafe_pickle else code_in_program(path)
    if found is not None:
        what, member = found
        held = "code" if member.endswith(".json") or member.startswith(COMPILED_FOLDER) else "a pickled Python object"
        raise InputError(
            f"{path} holds {held} ({what}, in {member}), which runs code when loaded; export the model again "
            f"with torch.export.save, or pass {UNSAFE_FLAG} if you trust its source"
        )
    # torch.export and its archive reader (a child logger) log tracebacks and format notes; ours is the one line
    logger = logging.getLogger("torch.export")
    with library_warnings(debug):
        was = logger.level
        logger.setLevel(logging.NOTSET if debug else logging.CRITICAL + 1)
        try:
            program = torch.export.load(str(path))
        except Exception as exc:  # a damaged archive, a program of a newer torch
            raise InputError(f"cannot load torch.export program {path}: {one_line(exc)}") from None
        finally:
            logger.setLevel(was)
    try:
        in_shape, out_shape = program_shapes(program)
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None
    if len(in_shape) != 4:
        raise InputError(f"{path}: expected an (N, C, H, W) image input, found shape {in_shape}")
    meta: dict[str, Any] = {}
    if in_shape[2] is not None and in_shape[3] is not None:
        meta["input_size"] = in_shape[2:]
    if len(out_shape) == 2 and out_shape[1] is not None:
        meta["num_classes"] = out_shape[1]
    cfg = model_config.resolve(settings.flags, settings.sidecar, meta, metadata_origin=ORIGIN)
    if "input_size" in meta and list(cfg.input_size) != meta["input_size"]:
        raise InputError(f"{path}: the program's input is {in_shape[2]}x{in_shape[3]}, not {cfg.input_size}")
    if "num_classes" in meta and cfg.num_classes != meta["num_classes"]:
        outputs = meta["num_classes"]
        raise InputError(f"{path}: the program has {outputs} outputs but --num-classes is {cfg.num_classes}")
    module = program_module(program.module(), in_shape[0])
    return TorchPredictor.of_module(module, cfg, path, TORCH_EXPORT, settings.device, settings.precision)
