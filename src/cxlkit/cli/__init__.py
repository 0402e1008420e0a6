"""The `cxlkit` command line (typer + rich); the only floor that prints."""
