"""docs/config.md names every variable src/cxlkit/_config.py reads, and no other."""
import re
from pathlib import Path

from cxlkit._config import ENV

DOC = Path(__file__).resolve().parents[2] / "docs" / "config.md"


def test_every_variable_read_is_documented_and_every_documented_one_is_read():
    documented = set(re.findall(r"^\| `(CXLKIT_[A-Z0-9_]+)` \|", DOC.read_text(), re.M))
    assert documented == set(ENV), (f"undocumented: {sorted(set(ENV) - documented)}; "
                                    f"documented but not read: {sorted(documented - set(ENV))}")
