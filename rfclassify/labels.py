"""The label set, in one place: canonical names are an external contract (DESIGN.md)."""

from __future__ import annotations

from rfclassify._exceptions import InputError

DIGITAL_LABELS: tuple[str, ...] = (
    "OOK", "4ASK", "8ASK", "BPSK", "QPSK", "8PSK", "16PSK", "32PSK",
    "16APSK", "32APSK", "64APSK", "128APSK",
    "16QAM", "32QAM", "64QAM", "128QAM", "256QAM",
    "GMSK", "OQPSK", "CPFSK", "GFSK", "PAM4",
)
ANALOG_LABELS: tuple[str, ...] = ("AM-DSB-WC", "AM-DSB-SC", "AM-SSB-WC", "AM-SSB-SC", "FM")
NOISE_LABEL = "NOISE"

#: Classes told apart only by fine amplitude/phase structure (orders above QPSK; APSK; QAM):
#: the ones the refiner re-decides and the evaluation reports apart.
HIGH_ORDER_LABELS: tuple[str, ...] = ("8PSK", "16PSK", "32PSK", "16APSK", "32APSK", "64APSK", "128APSK",
                                      "16QAM", "32QAM", "64QAM", "128QAM", "256QAM")

#: Model output order. Changing it invalidates every trained model.
LABELS: tuple[str, ...] = DIGITAL_LABELS + ANALOG_LABELS + (NOISE_LABEL,)

#: Every other class: the ones the low-order refiner re-decides from the burst's invariants.
LOW_ORDER_LABELS: tuple[str, ...] = tuple(name for name in LABELS if name not in HIGH_ORDER_LABELS)

#: Reported when the model is not confident (open-set rejection); never a model output.
UNKNOWN_LABEL = "unknown"

LABEL_TO_INDEX: dict[str, int] = {name: i for i, name in enumerate(LABELS)}


def label_index(name: str) -> int:
    """Index of a canonical label name; an unknown name is the caller's mistake."""
    try:
        return LABEL_TO_INDEX[name]
    except KeyError:
        raise InputError(f"unknown label {name!r}; known labels: {', '.join(LABELS)}") from None


def parse_labels(names: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """Validate a comma-separated string or list of labels; None or 'all' means every label."""
    if names is None:
        return LABELS
    if isinstance(names, str):
        if names.strip().lower() == "all":
            return LABELS
        names = [n.strip() for n in names.split(",") if n.strip()]
    if not names:
        raise InputError("empty label list")
    for n in names:
        label_index(n)
    return tuple(names)
