"""`python -m zero_core.launch [torchrun's options] program.py [args]`: the same as `zero launch`."""
from ._command import main

main()
