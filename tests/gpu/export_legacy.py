# models/export.py under a torch whose exporter defaults to dynamo (>= 2.9): keep the TorchScript
# exporter that the committed models come from (tests/gpu/device.sh runs it on a lent machine).
import inspect, os, runpy, sys
import torch
_orig = torch.onnx.export
if "dynamo" in inspect.signature(_orig).parameters:
    def _export(*a, **k):
        k.setdefault("dynamo", False)
        return _orig(*a, **k)
    torch.onnx.export = _export
here = os.path.dirname(os.path.abspath(__file__))
script = os.path.join(here, "..", "..", "models", "export.py")
sys.argv = [script] + sys.argv[1:]
runpy.run_path(script, run_name="__main__")
