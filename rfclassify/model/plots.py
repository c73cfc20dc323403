"""PNG figures for training and evaluation (matplotlib, Agg backend, imported on use)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from rfclassify._optional import require
from rfclassify._paths import storable


def _pyplot() -> Any:
    mpl = require("matplotlib", "plots")
    mpl.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def training_curves(history: list[dict[str, float]], path: str | os.PathLike[str]) -> None:
    """Loss and training accuracy against elapsed time (one row of `history` per log line)."""
    plt = _pyplot()
    t = [h["elapsed_s"] for h in history]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    a1.plot(t, [h["loss"] for h in history], label="total")
    a1.plot(t, [h["ce"] for h in history], label="cross-entropy")
    a1.plot(t, [h["snr_loss"] for h in history], label="SNR smooth-L1 (dB)")
    a1.set_xlabel("training time (s)")
    a1.set_ylabel("loss")
    a1.legend()
    a1.grid(alpha=0.3)
    a2.plot(t, [h["train_acc"] for h in history])
    a2.set_xlabel("training time (s)")
    a2.set_ylabel("training accuracy (augmented batches)")
    a2.set_ylim(0, 1)
    a2.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def accuracy_vs_snr(curves: dict[str, tuple[np.ndarray, np.ndarray]], path: str | os.PathLike[str],
                    title: str = "") -> None:
    """One line per name: accuracy at each SNR bin centre (dB)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, (snr, acc) in curves.items():
        ax.plot(snr, acc, marker="o", ms=3, label=storable(name))   # a dataset's name: \xNN (FreeType)
    ax.set_xlabel("SNR (dB)")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(storable(title))   # matplotlib's FreeType refused a path's bytes that are not UTF-8
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def confusion_matrix(cm: np.ndarray, labels: tuple[str, ...] | list[str], path: str | os.PathLike[str],
                     title: str = "") -> None:
    """Row-normalized confusion matrix (rows: true label, columns: predicted)."""
    plt = _pyplot()
    rows = cm.sum(axis=1, keepdims=True)
    norm = np.divide(cm, rows, out=np.zeros_like(cm, dtype=float), where=rows > 0)
    fig, ax = plt.subplots(figsize=(9, 8))
    ax.imshow(norm, vmin=0, vmax=1, cmap="Blues")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=90, fontsize=7)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    if title:
        ax.set_title(storable(title))   # matplotlib's FreeType refused a path's bytes that are not UTF-8
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
