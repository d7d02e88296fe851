"""Load a suite file with its capture entries and checkpoints read from disk: the suite layer's parser,
wired to the readers.

`ddbench.suite` stays free of capture and checkpoint I/O (it takes loaders); this module gives it the real
ones. A suite file is someone else's input, so the captures it names are confined to the suite file's own
folder (after symlinks and `..` are resolved) unless the user allows other folders on the command line
(`--allow-captures DIR`), and every file goes through the capture reader's checks (regular files only,
a size limit before reading). A checkpoint (a generation case's `generation.checkpoint`) is a folder
relative to the suite file, or an absolute one: only its config.json, index and safetensors headers are
read here (checked, and the weights' bytes counted), never anything from the network.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ddbench.errors import InputError
from ddbench.inputs.capture_file import read_capture
from ddbench.inputs.capture_summary import capture_files
from ddbench.inputs.checkpoint_config import checkpoint_folder, read_checkpoint_config
from ddbench.inputs.checkpoint_tensors import plan_tensors
from ddbench.suite.captures import CaptureInfo, CaptureLoader
from ddbench.suite.case_count import DEFAULT_MAX_CASES, RAISE_WITH
from ddbench.suite.checkpoints import CheckpointInfo, CheckpointLoader
from ddbench.suite.load import load_suite
from ddbench.suite.model import CaptureRef, Suite


def load_suite_file(
    path: str | Path,
    *,
    max_cases: int = DEFAULT_MAX_CASES,
    allow_capture_dirs: Iterable[str | Path] = (),
) -> Suite:
    """The suite in `path`, its captures read from its folder or from `allow_capture_dirs`."""
    path = Path(path)
    loader = capture_loader(path.parent, allow_capture_dirs, max_files=max_cases)
    return load_suite(path, loader, max_cases=max_cases, checkpoints=checkpoint_loader(path.parent))


def _inside(path: Path, roots: list[Path]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in roots)


def capture_loader(
    base: Path, allowed: Iterable[str | Path] = (), *, max_files: int = DEFAULT_MAX_CASES
) -> CaptureLoader:
    """Read captures named relative to `base` (the suite file's folder); a folder means all of its files."""
    roots = [base.resolve(), *(Path(d).resolve() for d in allowed)]
    cache: dict[Path, CaptureInfo] = {}

    def confined(named: Path) -> Path:
        real = named.resolve()
        if not _inside(real, roots):
            shown = "" if real == named.absolute() else f" (resolves to {real})"
            raise InputError(
                f"is outside the suite file's folder {roots[0]}{shown}; captures are read from there only "
                "unless you allow their folder with --allow-captures DIR",
                file=str(named),
            )
        return real

    def load(name: str) -> list[CaptureInfo]:
        named = confined(base / name)
        paths = capture_files([named])
        if len(paths) > max_files:
            raise InputError(
                f"holds {len(paths)} capture files, above the limit of {max_files} cases per suite file; "
                f"{RAISE_WITH}",
                file=str(named),
            )
        out = []
        for path in paths:
            real = confined(path)  # a symlink inside an allowed folder may point anywhere
            if real not in cache:
                cache[real] = _info(path)
            out.append(cache[real])
        return out

    return load


def _info(path: Path) -> CaptureInfo:
    capture = read_capture(path)
    x = capture.inputs
    return CaptureInfo(
        ref=CaptureRef(str(path), capture.sha256),
        stem=path.name.removesuffix(".safetensors"),
        model=capture.metadata.get("model"),
        heads=x.num_heads,
        sm_scale=x.sm_scale,
        batch_size=x.batch_size,
        prefix_lens=tuple(x.prefix_lens),
        q_len=x.max_len_extend,  # what a backend sizes its work by, so the estimate counts that
        q_lens=tuple(x.q_lens),
        page_size=x.page_size,
        parents=tuple(x.trees[0].parents) if x.trees else None,
    )


def checkpoint_loader(base: Path) -> CheckpointLoader:
    """Read checkpoint folders named relative to `base` (the suite file's folder): each (folder, layers)
    once, however many cases name it."""
    cache: dict[tuple[str, int | None], CheckpointInfo] = {}

    def load(name: str, layers: int | None) -> CheckpointInfo:
        folder = checkpoint_folder(base / name, name)
        key = (name, layers)
        if key not in cache:
            config = read_checkpoint_config(folder)
            plan = plan_tensors(config, config.layers if layers is None else layers)
            cache[key] = CheckpointInfo(
                name=name,
                folder=str(folder),
                model_type=config.model_type,
                heads=config.heads,
                hidden=config.hidden,
                vocab=config.vocab,
                layers=config.layers,
                sm_scale=config.sm_scale,
                base_bytes=plan.base_bytes,
                layer_bytes=plan.layer_bytes,
                working_bytes=plan.working_bytes,
            )
        return cache[key]

    return load
