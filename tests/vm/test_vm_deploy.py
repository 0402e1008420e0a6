"""docs/deploy.md runs as written: each ```sh block preceded by `<!-- rig: TOPOLOGY -->` runs,
in order, with bash -e in that topology's guest."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

import rig

pytestmark = pytest.mark.vm
DOC = rig.PROJECT / "docs" / "deploy.md"
_BLOCK = re.compile(r"<!-- rig: ([\w-]+) -->\s*```sh\n(.*?)```", re.S)


def blocks(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in _BLOCK.finditer(text)]


@pytest.mark.topology("devdax")
def test_deploy_guide_commands_run_in_the_devdax_guest(tmp_path: Path):
    for i, (topo, script) in enumerate(blocks(DOC.read_text())):
        if topo != "devdax":
            continue
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True,
                           text=True, timeout=600, cwd=tmp_path)
        assert r.returncode == 0, f"block {i}:\n{script}\n--- out:\n{r.stdout}\n{r.stderr}"
