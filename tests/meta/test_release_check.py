"""The release check (tests/release_check.py, `make release-check`) and the testing-only
machinery: the development build this suite runs on has crash points and mutations, the
checker flags them, and a release build's Python face refuses mutations with a clear error."""
from __future__ import annotations

from pathlib import Path

import pytest

import cxlkit._native as native
from cxlkit import testing
from release_check import (PUBLIC_HEADER, PUBLIC_VERSION, TESTING_HEADER, declared, exported,
                           exported_versions, listed, map_problems, map_text, problems)

LIB = Path(native.__file__).with_name("libcxlkit.so")


def test_the_public_header_declares_no_test_machinery():
    assert {"cxk_mutate", "cxk_pool_crash_at", "cxk_pool_stop_at"} <= declared(TESTING_HEADER)
    assert not declared(PUBLIC_HEADER) & declared(TESTING_HEADER)


def test_the_suite_runs_on_a_testing_build():
    assert testing.TESTING_BUILD and hasattr(native, "pool_crash_at")
    assert "cxk_mutate" in exported(LIB)


def test_the_checker_flags_a_library_with_test_machinery():
    found = problems(LIB)
    assert any("test machinery cxk_mutate" in line for line in found), found
    assert any("CXLKIT_MUTATE" in line for line in found), found
    # the testing build exports exactly the public header's functions besides its own
    assert not [line for line in found if "does not export" in line or "does not declare" in line]


def test_mutate_in_a_release_build_raises_RuntimeError_naming_the_mutation(monkeypatch):
    monkeypatch.setattr(testing, "TESTING_BUILD", False)
    with pytest.raises(RuntimeError, match="read_invalidate.*release build"):
        with testing.mutate("read_invalidate"):
            pass


def test_the_symbol_map_lists_exactly_the_headers_functions():
    assert map_problems() == []
    assert listed(map_text()) == declared(PUBLIC_HEADER) | declared(TESTING_HEADER)


def test_every_public_function_is_exported_under_the_public_version():
    versions = exported_versions(LIB)
    assert {versions[n] for n in declared(PUBLIC_HEADER)} == {PUBLIC_VERSION}
