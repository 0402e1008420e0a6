"""docs/deploy.md's rig blocks (run in QEMU by tests/vm/test_vm_deploy.py) name real
topologies, and every cxlkit command in the guide parses with the options it uses."""
from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "vm"))
import rig  # noqa: E402
from test_vm_deploy import DOC, blocks  # noqa: E402

from cxlkit.cli.main import _load, app  # noqa: E402


def test_deploy_guide_has_rig_blocks_for_known_topologies_only():
    found = blocks(DOC.read_text())
    assert len(found) >= 4
    assert {t for t, _ in found} <= set(rig.TOPOLOGIES)


def _cxlkit_commands(text: str) -> list[list[str]]:
    cmds = []
    code = "\n".join(re.findall(r"```sh\n(.*?)```", text, re.S))
    for line in re.findall(r"^(?:\w+=\S+ )*cxlkit .*$", code, re.M):
        argv = shlex.split(line.split("|")[0])
        cmds.append(argv[argv.index("cxlkit") + 1:])
    return cmds


@pytest.mark.parametrize("argv", _cxlkit_commands(DOC.read_text()), ids=" ".join)
def test_every_cxlkit_command_of_the_guide_accepts_its_options(argv):
    _load()
    r = CliRunner().invoke(app, [*argv, "--help"])
    assert r.exit_code == 0, r.output
