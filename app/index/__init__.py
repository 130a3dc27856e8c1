"""Vector indices: binary codes by Hamming distance and unit floats by inner product.

See :mod:`app.index.base` for the shared interface and result semantics.
"""

from app.index.base import PAD_ID, DuplicateIdError, SnapshotError, VectorIndex
from app.index.binary_index import HAMMING_PAD, BinaryIndex
from app.index.float_index import FloatIndex, cosine_distance

__all__ = [
    "HAMMING_PAD",
    "PAD_ID",
    "BinaryIndex",
    "DuplicateIdError",
    "FloatIndex",
    "SnapshotError",
    "VectorIndex",
    "cosine_distance",
]
