"""Fashion-MNIST from local IDX files (Debian's dataset-fashion-mnist installs them in
/usr/share/datasets/fashion-mnist) and the small ResNet the search uses by default.

The IDX format: a big-endian header (two zero bytes, a type byte 0x08 = unsigned byte, the
number of dimensions), one big-endian 32-bit size per dimension, then the data; the files are
gzip-compressed. Nothing is downloaded.
"""

import gzip
import os
import struct

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

from .errors import Error
from .kas import Placeholder

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"
FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
MEAN, STD = 0.2860, 0.3530   # of the training images, scaled to [0, 1]


def read_idx(path):
    """Reads a (gzip-compressed when the name ends in .gz) IDX file of unsigned bytes into a
    NumPy array; malformed files raise kiln.Error naming the problem."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as e:
        raise Error("cannot read %s: %s" % (path, e)) from None
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise Error("%s: not an IDX file (bad magic)" % path)
    if data[2] != 0x08:
        raise Error("%s: IDX element type 0x%02x, only unsigned bytes (0x08) are supported"
                    % (path, data[2]))
    ndim = data[3]
    if ndim < 1 or len(data) < 4 + 4 * ndim:
        raise Error("%s: truncated IDX header" % path)
    dims = struct.unpack(">%dI" % ndim, data[4:4 + 4 * ndim])
    n = int(np.prod(dims, dtype=np.int64))
    body = data[4 + 4 * ndim:]
    if len(body) != n:
        raise Error("%s: IDX data holds %d bytes, the header's shape %s needs %d"
                    % (path, len(body), list(dims), n))
    return np.frombuffer(body, dtype=np.uint8).reshape(dims)


def load(split, n=None, image_size=28, data_dir=None, seed=0):
    """Returns ``(images, labels)`` of the ``split`` ("train" or "test") as tensors: images
    float32 ``[n, 1, S, S]`` normalised with the training set's mean and deviation (resized by
    area averaging when ``image_size`` S is not 28), labels int64 ``[n]``. ``n`` images are drawn
    without replacement by a permutation seeded with ``seed`` (all when None)."""
    if split not in FILES:
        raise Error("unknown split %r (train or test)" % (split,))
    d = data_dir or DEFAULT_DIR
    img_path, lab_path = (os.path.join(d, f) for f in FILES[split])
    for p in (img_path, lab_path):
        if not os.path.exists(p):
            raise Error("%s is missing: install Debian's dataset-fashion-mnist or pass the "
                        "directory holding the IDX files" % p)
    images, labels = read_idx(img_path), read_idx(lab_path)
    if images.ndim != 3 or labels.ndim != 1 or images.shape[0] != labels.shape[0]:
        raise Error("%s / %s: expected N x H x W images and N labels, got %s and %s"
                    % (img_path, lab_path, list(images.shape), list(labels.shape)))
    idx = np.arange(images.shape[0])
    if n is not None:
        if not 0 < n <= images.shape[0]:
            raise Error("%d %s images asked for, the set has %d" % (n, split, images.shape[0]))
        idx = np.random.RandomState(seed).permutation(images.shape[0])[:n]
    x = torch.from_numpy(images[idx].astype(np.float32) / 255.0).unsqueeze(1)
    if image_size != images.shape[1]:
        x = F.interpolate(x, size=(image_size, image_size), mode="area")
    x = (x - MEAN) / STD
    return x.contiguous(), torch.from_numpy(labels[idx].astype(np.int64))


class Block(nn.Module):
    """A ResNet basic block whose two 3x3 convolutions are placeholders."""

    def __init__(self, c):
        super().__init__()
        self.conv1 = Placeholder()
        self.bn1 = nn.BatchNorm2d(c)
        self.relu1 = nn.ReLU()
        self.conv2 = Placeholder()
        self.bn2 = nn.BatchNorm2d(c)
        self.relu2 = nn.ReLU()

    def forward(self, x):
        y = self.relu1(self.bn1(self.conv1(x)))
        return self.relu2(x + self.bn2(self.conv2(y)))


class ResNetFMNIST(nn.Module):
    """A small ResNet for 1-channel images: a 3x3 stem to ``width`` channels, then three stages
    of one basic block each at ``width``, 2·``width`` and 4·``width`` channels (S, S/2, S/4
    pixels), joined by 1x1 stride-2 projections, global average pooling and a linear classifier.
    The six 3x3 convolutions of the blocks are ``kiln.Placeholder``s (K = C, stride 1)."""

    def __init__(self, width=16, num_classes=10):
        super().__init__()
        w = width
        self.stem = nn.Sequential(nn.Conv2d(1, w, 3, padding=1, bias=False), nn.BatchNorm2d(w),
                                  nn.ReLU())
        self.stage1 = Block(w)
        self.down1 = nn.Sequential(nn.Conv2d(w, 2 * w, 1, stride=2, bias=False),
                                   nn.BatchNorm2d(2 * w), nn.ReLU())
        self.stage2 = Block(2 * w)
        self.down2 = nn.Sequential(nn.Conv2d(2 * w, 4 * w, 1, stride=2, bias=False),
                                   nn.BatchNorm2d(4 * w), nn.ReLU())
        self.stage3 = Block(4 * w)
        self.fc = nn.Linear(4 * w, num_classes)

    def forward(self, x):
        x = self.stage1(self.stem(x))
        x = self.stage2(self.down1(x))
        x = self.stage3(self.down2(x))
        return self.fc(x.mean(dim=(2, 3)))


def resnet_fmnist(width=16, num_classes=10):
    return ResNetFMNIST(width, num_classes)
