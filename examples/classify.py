#!/usr/bin/python3
"""Classify a JPEG with an ImageNet model: resize, center-crop, normalize, predict, print the top 5.

usage: examples/classify.py [MODEL.onnx] [IMAGE.jpg]    (default: models/mobilenetv2.onnx examples/sample.jpg)

Prints one line per class, best first: the class index and its softmax probability.
The preprocessing is torchvision's for ImageNet: shorter side to 256 (bilinear), center 224x224 crop,
RGB scaled to [0, 1], then normalized with ImageNet's per-channel mean and standard deviation.
"""
import os
import sys

import numpy as np
from PIL import Image

import nn

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def preprocess(path, size=224, resize=256):
    img = Image.open(path).convert("RGB")
    w, h = img.size
    scale = resize / min(w, h)
    img = img.resize((max(resize, round(w * scale)), max(resize, round(h * scale))), Image.BILINEAR)
    w, h = img.size
    left, top = int(round((w - size) / 2.0)), int(round((h - size) / 2.0))
    img = img.crop((left, top, left + size, top + size))
    x = (np.asarray(img, dtype=np.float32) / 255.0 - MEAN) / STD  # H, W, C
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])  # 1, C, H, W: C-contiguous, used in place


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    model_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "models", "mobilenetv2.onnx")
    image_path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(root, "examples", "sample.jpg")
    model = nn.load(model_path)
    logits = model.predict(preprocess(image_path))[0]
    p = np.exp(logits - logits.max())
    p /= p.sum()
    for i in np.argsort(-logits)[:5]:
        print("%4d  %.4f" % (i, p[i]))


if __name__ == "__main__":
    try:
        main()
    except nn.Error as e:
        sys.exit("classify.py: %s" % e)
