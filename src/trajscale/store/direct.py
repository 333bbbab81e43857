# moved to trajscale.h5md.chunks (the reads at byte addresses): this name stays for imports not yet updated
import importlib
import sys

sys.modules[__name__] = importlib.import_module("trajscale.h5md.chunks")
