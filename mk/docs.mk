# ---- the documentation site (mkdocs, material theme, mkdocstrings): `make docs` builds it into
# build/site in strict mode, so a broken link, a page left out of the nav or an API name that
# no longer resolves fails; `make test` builds it too. Its packages go into the main .venv
# (pyproject's `docs` extra). docs-sysdeps installs Chromium, with which
# tests/meta/test_docs_site.py looks at the built pages (it skips, saying why, without it). ----
# the same as pyproject's `docs` extra (the package itself is installed by make build)
DOCS_DEPS := 'mkdocs>=1.6' 'mkdocs-material>=9.5' 'mkdocstrings[python]>=0.26'
DOCS_STAMP := $(VENV)/.docs-stamp

$(DOCS_STAMP): pyproject.toml mk/docs.mk | $(VPY)
	$(PIP) install $(DOCS_DEPS)
	touch $@

.PHONY: docs docs-deps docs-sysdeps
docs-deps: $(DOCS_STAMP)

docs-sysdeps: sysdeps  # one apt-get at a time
	@if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && \
	  [ "$$(id -u)" = 0 ]; then (apt-get update && apt-get install -y --no-install-recommends chromium) || \
	  echo "warning: chromium not installed: tests/meta/test_docs_site.py skips"; fi

docs: $(DOCS_STAMP)
	@mkdir -p build
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

test: docs
pytest: docs-sysdeps docs-deps
