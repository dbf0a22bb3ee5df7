import os
import sys

# Tests import the freshly built module: build/python unless PYTHONPATH says otherwise.
_BUILD_PYTHON = os.path.join(os.path.dirname(__file__), "..", "..", "build", "python")
if not any(os.path.isdir(os.path.join(p, "drover")) and
           os.path.exists(os.path.join(p, "drover", "__init__.py")) and
           any(f.startswith("_drover") for f in os.listdir(os.path.join(p, "drover")))
           for p in sys.path if p and os.path.isdir(p)):
    sys.path.insert(0, os.path.abspath(_BUILD_PYTHON))
