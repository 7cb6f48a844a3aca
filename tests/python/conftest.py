"""pytest setup: import the package from the build folder (make python-build), never an installed copy."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, os.environ.get("NN_BUILD", "build"))
sys.path.insert(0, os.path.join(BUILD, "python"))
