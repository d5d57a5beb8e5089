"""Extract the launch-config schemas autopar validates its generated files against.

Reads the frameworks' own sources from git checkouts (never imports or runs them: they need torch)
and writes key names, types, choices and defaults to autopar/data/launch_schemas/*.json, with the
repository, tag and commit recorded in each file. Run from the repository root:

    python scripts/extract_launch_schemas.py --megatron /path/Megatron-LM.git --megatron-ref core_v0.19.0 \
        --torchtitan /path/torchtitan.git --torchtitan-ref v0.2.2 \
        --deepspeed /path/DeepSpeed.git --deepspeed-ref v0.19.5

Each path is a git directory (bare or not); files are read with `git show REF:PATH`.

- Megatron-LM: every `add_argument(...)` in megatron/training/arguments.py, plus the arguments that
  `ArgumentGroupFactory(SomeConfig, exclude=...)` derives from dataclass fields (rules restated from
  megatron/training/argument_utils.py: `--field-name`, bool -> store_true, or store_false named
  `--no-x/--disable-x` when the default is True; Optional[X] -> X; list[X] -> nargs '+'; Literal ->
  choices; Enum -> choices of member names; `metadata={"argparse_meta": {...}}` overrides).
- torchtitan: the dataclasses of torchtitan/config/job_config.py, nested into TOML sections from
  `JobConfig`, plus the model names and flavors registered in torchtitan/models/*/__init__.py.
- DeepSpeed: the pydantic config classes the JSON sections are parsed with (zero_optimization,
  bf16, tensor_parallel, activation_checkpointing) and the top-level key constants of
  deepspeed/runtime/constants.py.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
from pathlib import Path
from typing import Any

OUT = Path("autopar/data/launch_schemas")


def git_show(repo: str, ref: str, path: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", repo, "show", f"{ref}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def git_ls(repo: str, ref: str, prefix: str) -> list[str]:
    out = subprocess.run(
        ["git", "--git-dir", repo, "ls-tree", "-r", "--name-only", ref, prefix],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [p for p in out.splitlines() if p.endswith(".py")]


def git_commit(repo: str, ref: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", repo, "rev-parse", f"{ref}^{{commit}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def literal(node: ast.AST | None) -> Any:
    """A Python literal, or None when the expression is not one."""
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None


def type_name(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if node is not None:
        return "callable"
    return None


# --------------------------------------------------------------------------- class index


class ClassIndex:
    """Every class defined in a set of files, by name (first definition wins, core before training)."""

    def __init__(self, sources: dict[str, str]) -> None:
        self.classes: dict[str, ast.ClassDef] = {}
        for path in sorted(sources):
            try:
                tree = ast.parse(sources[path])
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    self.classes.setdefault(node.name, node)

    def get(self, name: str) -> ast.ClassDef | None:
        return self.classes.get(name)

    def enum_members(self, name: str) -> list[str] | None:
        cls = self.get(name)
        if cls is None or not any(type_name(b) in ("Enum", "IntEnum", "StrEnum") for b in cls.bases):
            return None
        return [
            t.id
            for st in cls.body
            if isinstance(st, ast.Assign)
            for t in st.targets
            if isinstance(t, ast.Name)
        ]

    def fields(self, name: str) -> list[tuple[str, ast.AST, ast.AST | None]]:
        """(name, annotation, default expression) of a dataclass and its bases, base fields first."""
        cls = self.get(name)
        if cls is None:
            raise KeyError(f"class {name} not found")
        out: dict[str, tuple[str, ast.AST, ast.AST | None]] = {}
        for base in cls.bases:
            bname = type_name(base)
            if bname and self.get(bname) is not None:
                for f in self.fields(bname):
                    out[f[0]] = f
        for st in cls.body:
            if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                if "ClassVar" in ast.unparse(st.annotation):
                    continue
                out[st.target.id] = (st.target.id, st.annotation, st.value)
        return list(out.values())


# --------------------------------------------------------------------------- Megatron-LM


def _ann_kwargs(ann: ast.AST, index: ClassIndex) -> dict[str, Any] | None:
    """argparse kwargs Megatron's ArgumentGroupFactory infers from a field annotation (None: it cannot)."""
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        ann = ast.parse(ann.value, mode="eval").body
    if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):  # X | None
        parts = [ann.left, ann.right]
        non_none = [p for p in parts if not (isinstance(p, ast.Constant) and p.value is None)]
        return _ann_kwargs(non_none[0], index) if len(non_none) == 1 else None
    if isinstance(ann, ast.Subscript):
        head = type_name(ann.value)
        inner = ann.slice
        if head == "Optional":
            return _ann_kwargs(inner, index)
        if head == "Union":
            elts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            non_none = [p for p in elts if not (isinstance(p, ast.Constant) and p.value is None)]
            return _ann_kwargs(non_none[0], index) if len(non_none) == 1 and len(elts) == 2 else None
        if head in ("list", "List"):
            kw = _ann_kwargs(inner, index)
            return None if kw is None else {**kw, "nargs": "+"}
        if head == "Literal":
            elts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            vals = [literal(e) for e in elts]
            return {"type": type(vals[0]).__name__, "choices": vals}
        return None
    name = type_name(ann)
    if name in ("int", "float", "str", "bool"):
        return {"type": name}
    members = index.enum_members(name or "")
    if members is not None:
        return {"type": "enum", "choices": members}
    return None


def _field_meta(default: ast.AST | None) -> tuple[ast.AST | None, dict[str, Any], bool]:
    """(default expression, argparse_meta dict, init flag) of a dataclass field's right-hand side."""
    if isinstance(default, ast.Call) and type_name(default.func) == "field":
        kws = {k.arg: k.value for k in default.keywords}
        meta: dict[str, Any] = {}
        md = kws.get("metadata")
        if isinstance(md, ast.Dict):
            for k, v in zip(md.keys, md.values, strict=False):
                if literal(k) == "argparse_meta" and isinstance(v, ast.Dict):
                    for kk, vv in zip(v.keys, v.values, strict=False):
                        key = literal(kk)
                        meta[key] = literal(vv) if key not in ("type",) else type_name(vv)
        init = literal(kws.get("init")) is not False
        dflt = kws.get("default")
        if dflt is None and "default_factory" in kws:
            dflt = ast.Constant(value="<factory>")
        return dflt, meta, init
    return default, {}, True


def factory_args(cls_name: str, exclude: set[str], index: ClassIndex) -> dict[str, dict[str, Any]]:
    """The flags ArgumentGroupFactory(cls, exclude) adds (see the module docstring for the rules)."""
    out: dict[str, dict[str, Any]] = {}
    for name, ann, rhs in index.fields(cls_name):
        if name in exclude:
            continue
        default, meta, init = _field_meta(rhs)
        if not init:
            continue
        kw = _ann_kwargs(ann, index) or {"type": "unknown"}
        names = ["--" + name.replace("_", "-")]
        if kw.get("type") == "bool":
            dval = literal(default)
            kw.pop("type")
            kw["action"] = "store_true" if dval is False or dval is None else "store_false"
            if kw["action"] == "store_false":
                names = ["--no-" + name.replace("_", "-"), "--disable-" + name.replace("_", "-")]
        kw["dest"] = name
        for k, v in meta.items():
            if k == "arg_names":
                names = list(v)
            elif k in ("type", "choices", "action", "nargs", "dest"):
                kw[k] = v
        if "action" in kw and kw["action"] in ("store_true", "store_false"):
            kw.pop("type", None)
        for n in names:
            out[n] = dict(kw)
    return out


def _local_lists(fn: ast.FunctionDef) -> dict[str, list[str]]:
    return {
        t.id: literal(st.value)
        for st in ast.walk(fn)
        if isinstance(st, ast.Assign) and isinstance(literal(st.value), list)
        for t in st.targets
        if isinstance(t, ast.Name)
    }


def megatron_schema(repo: str, ref: str) -> dict[str, Any]:
    path = "megatron/training/arguments.py"
    src = git_show(repo, ref, path)
    files = [p for p in git_ls(repo, ref, "megatron") if "/tests/" not in p]
    index = ClassIndex({p: git_show(repo, ref, p) for p in files})
    args: dict[str, dict[str, Any]] = {}
    for fn in ast.walk(ast.parse(src)):
        if not isinstance(fn, ast.FunctionDef):
            continue
        lists = _local_lists(fn)
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            fname = type_name(node.func)
            if fname == "add_argument":
                names = [literal(a) for a in node.args if isinstance(literal(a), str)]
                kws = {k.arg: k.value for k in node.keywords}
                entry: dict[str, Any] = {}
                if "action" in kws:
                    entry["action"] = literal(kws["action"]) or type_name(kws["action"])
                if "type" in kws:
                    entry["type"] = type_name(kws["type"])
                if "choices" in kws:
                    ch = literal(kws["choices"])
                    if ch is None and isinstance(kws["choices"], ast.Name):
                        ch = lists.get(kws["choices"].id)
                    entry["choices"] = list(ch) if ch is not None else "dynamic"
                if "nargs" in kws:
                    entry["nargs"] = literal(kws["nargs"])
                entry["dest"] = literal(kws.get("dest")) or names[0].lstrip("-").replace("-", "_")
                for n in names:
                    if n.startswith("-"):
                        args.setdefault(n, entry)
            elif fname == "ArgumentGroupFactory" and node.args:
                ex = next((k.value for k in node.keywords if k.arg == "exclude"), None)
                exclude = literal(ex) if ex is not None else []
                if exclude is None and isinstance(ex, ast.Name):
                    exclude = lists.get(ex.id, [])
                for n, e in factory_args(type_name(node.args[0]) or "", set(exclude or []), index).items():
                    args.setdefault(n, e)
    return {
        "framework": "megatron",
        "repo": "NVIDIA/Megatron-LM",
        "ref": ref,
        "commit": git_commit(repo, ref),
        "source": [path, "megatron/training/argument_utils.py", "(dataclasses it builds groups from)"],
        "arguments": dict(sorted(args.items())),
    }


# --------------------------------------------------------------------------- torchtitan


def _tt_field(ann: ast.AST, default: ast.AST | None) -> dict[str, Any]:
    text = ast.unparse(ann)
    entry: dict[str, Any] = {"annotation": text}
    if text.startswith("Literal[") or "Literal[" in text:
        sub = ast.parse(text[text.index("Literal[") :].split("]")[0] + "]", mode="eval").body
        elts = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
        entry["choices"] = [literal(e) for e in elts]
    d = default
    if isinstance(d, ast.Call) and type_name(d.func) == "field":
        d = next((k.value for k in d.keywords if k.arg == "default"), None)
    val = literal(d)
    if val is not None or (isinstance(d, ast.Constant) and d.value is None):
        entry["default"] = val
    return entry


def _tt_sections(index: ClassIndex, cls: str, prefix: str, out: dict[str, dict[str, Any]]) -> None:
    body: dict[str, Any] = {}
    for name, ann, rhs in index.fields(cls):
        tname = type_name(ann)
        if tname and index.get(tname) is not None and index.enum_members(tname) is None:
            _tt_sections(index, tname, f"{prefix}.{name}" if prefix else name, out)
            continue
        body[name] = _tt_field(ann, rhs)
    if prefix:
        out[prefix] = body


def _tt_models(repo: str, ref: str) -> dict[str, list[str]]:
    """Model name -> flavors: the dict keys in torchtitan/models/<name>/__init__.py."""
    models: dict[str, list[str]] = {}
    for path in git_ls(repo, ref, "torchtitan/models"):
        parts = path.split("/")
        if len(parts) != 4 or parts[3] != "__init__.py":
            continue
        tree = ast.parse(git_show(repo, ref, path))
        flavors: list[str] = []
        for node in ast.walk(tree):
            if not isinstance(node, ast.Dict) or not node.keys:
                continue
            keys_ok = all(isinstance(literal(k), str) for k in node.keys)
            if keys_ok and all(
                isinstance(v, ast.Call) and "Args" in (type_name(v.func) or "") for v in node.values
            ):
                flavors += [literal(k) for k in node.keys]
        if flavors:
            models[parts[2]] = flavors
    return dict(sorted(models.items()))


def torchtitan_schema(repo: str, ref: str) -> dict[str, Any]:
    path = "torchtitan/config/job_config.py"
    index = ClassIndex({path: git_show(repo, ref, path)})
    sections: dict[str, dict[str, Any]] = {}
    _tt_sections(index, "JobConfig", "", sections)
    return {
        "framework": "torchtitan",
        "repo": "pytorch/torchtitan",
        "ref": ref,
        "commit": git_commit(repo, ref),
        "source": [path, "torchtitan/models/*/__init__.py"],
        "sections": sections,
        "models": _tt_models(repo, ref),
    }


# --------------------------------------------------------------------------- DeepSpeed

DS_SECTIONS = {
    "zero_optimization": ("deepspeed/runtime/zero/config.py", "DeepSpeedZeroConfig"),
    "bf16": ("deepspeed/runtime/precision_config.py", "DeepSpeedBF16Config"),
    "tensor_parallel": ("deepspeed/runtime/tensor_parallel/config.py", "TPTrainingConfig"),
}


def _ds_fields(index: ClassIndex, cls: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, ann, rhs in index.fields(cls):
        entry: dict[str, Any] = {"annotation": ast.unparse(ann)}
        if isinstance(rhs, ast.Call) and type_name(rhs.func) in ("Field", "field"):
            kws = {k.arg: k.value for k in rhs.keywords}
            alias = literal(kws.get("alias"))
            if alias:
                entry["alias"] = alias
            d = rhs.args[0] if rhs.args else kws.get("default")
            if literal(d) is not None:
                entry["default"] = literal(d)
        elif literal(rhs) is not None:
            entry["default"] = literal(rhs)
        out[name] = entry
    return out


def _ds_top_keys(src: str) -> list[str]:
    keys = set()
    for st in ast.parse(src).body:
        if isinstance(st, ast.Assign) and isinstance(literal(st.value), str):
            name = st.targets[0].id if isinstance(st.targets[0], ast.Name) else ""
            if name.isupper() and not name.endswith(("_DEFAULT", "_FORMAT")):
                keys.add(literal(st.value))
    return sorted(keys)


def deepspeed_schema(repo: str, ref: str) -> dict[str, Any]:
    files = {p for p, _ in DS_SECTIONS.values()} | {"deepspeed/runtime/config_utils.py"}
    sources = {p: git_show(repo, ref, p) for p in files}
    index = ClassIndex(sources)
    top = set(_ds_top_keys(git_show(repo, ref, "deepspeed/runtime/constants.py")))
    for key, (path, _) in DS_SECTIONS.items():  # section keys read where the section is parsed
        if f"'{key}'" in sources[path] or f'"{key}"' in sources[path]:
            top.add(key)
    base = index.get("DeepSpeedConfigModel")
    extra = "forbid" if base is not None and "forbid" in ast.unparse(base) else "allow"
    return {
        "framework": "deepspeed",
        "repo": "deepspeedai/DeepSpeed",
        "ref": ref,
        "commit": git_commit(repo, ref),
        "source": sorted(files) + ["deepspeed/runtime/constants.py"],
        "extra": extra,
        "top_level_keys": sorted(top),
        "sections": {k: {"class": c, "fields": _ds_fields(index, c)} for k, (_, c) in DS_SECTIONS.items()},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for fw in ("megatron", "torchtitan", "deepspeed"):
        p.add_argument(f"--{fw}", required=True, help="git directory")
        p.add_argument(f"--{fw}-ref", required=True, help="tag or commit")
    a = p.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    for fw, fn in (
        ("megatron", megatron_schema),
        ("torchtitan", torchtitan_schema),
        ("deepspeed", deepspeed_schema),
    ):
        ref = getattr(a, f"{fw}_ref")
        schema = fn(getattr(a, fw), ref)
        name = f"{fw}-{ref}.json"
        (OUT / name).write_text(json.dumps(schema, indent=1, sort_keys=False) + "\n", encoding="utf-8")
        print(f"wrote {OUT / name}")


if __name__ == "__main__":
    main()
