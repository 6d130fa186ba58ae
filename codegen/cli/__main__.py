"""`python -m codegen.cli` = `cisl`."""

from . import main

main()
