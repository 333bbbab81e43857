"""A benchmark script's JSON output, as the library's commands write theirs: refused where it exists without
``--overwrite`` or its folder is missing (one line, exit 1), written atomically."""

from __future__ import annotations

import json
import os

from trajscale.errors import OutputError
from trajscale.util import atomic_output, check_output_path


def check_script_output(prog: str, path: str | os.PathLike, overwrite: bool) -> None:
    """An output existing without ``overwrite`` or in a missing folder: one line and exit 1, before measuring."""
    try:
        check_output_path(path, overwrite=overwrite)
    except OutputError as exc:
        raise SystemExit(f"{prog}: {exc}") from None


def write_script_json(prog: str, path: str | os.PathLike, obj, overwrite: bool) -> None:
    """``obj`` as JSON at ``path``, atomically (refused as :func:`check_script_output` refuses)."""
    try:
        with atomic_output(path, overwrite=overwrite) as tmp:
            tmp.write_text(json.dumps(obj, indent=1))
    except OutputError as exc:   # appeared, or lost its folder, while the script measured
        raise SystemExit(f"{prog}: {exc}") from None
