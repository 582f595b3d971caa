"""Seeded, counter-based noise (P11, P15, P16 in docs/privacy.md).

Every random draw made by a DP mechanism is keyed by
``(component, instance, tick, purpose)`` plus the index of the value inside the
drawn array.  The key and the secret master seed go through HMAC-SHA256 and the
digest seeds a Philox generator, so

* a retried Beam bundle, the local engine and the Beam pipeline redraw
  *identical* noise for the same seed and key;
* two different draws never share noise (P15: a threshold redrawn with
  the same noise after an SVT restart doubles its privacy loss);
* nobody without the seed can predict or subtract the noise (P16).

Released counts carry integer noise only (P11, the Mironov floating-point
attack): rounded Gaussian noise (post-processing of the Gaussian mechanism on an
integer count) or discrete Laplace noise (difference of two geometrics).
"""
from __future__ import annotations

import hashlib
import hmac
import os
import threading
import warnings
from collections import Counter
from typing import Optional, Hashable

import numpy as np

__all__ = ["NoiseSource", "seed_from_entropy", "seed_bytes", "fingerprint", "UnsafeSeedWarning", "TestSeed",
           "MIN_SEED_BYTES", "key_material_problem", "SECRET_SEED", "TEST_SEED"]

# A secret seed must be out of reach of an offline search: 256 bits of key material.
MIN_SEED_BYTES = 32

# What a release's plan says about its seed. Nothing derived from the seed is ever released: a
# fingerprint of a guessable seed (a small integer, a passphrase) lets anyone confirm a guess offline
# and then rebuild and subtract every noise draw.
SECRET_SEED = "secret (nothing derived from it is released)"
TEST_SEED = "test seed: not private (a known integer: anyone who knows it can rebuild the noise)"


class UnsafeSeedWarning(UserWarning):
    """A fixed, known seed makes every noise draw predictable: tests only."""


class TestSeed(bytes):
    """The master seed derived from an integer ``random_state``: the same bytes as any seed, marked so
    that the plan of every release says in plain words that its noise is not private."""

    __test__ = False  # not a pytest class


def seed_from_entropy() -> bytes:
    """A fresh 256-bit master seed from the operating system."""
    return os.urandom(32)


MIN_DISTINCT_BYTES = 16  # 32 random bytes hold ~30 distinct values; fewer than 16 happens with probability < 1e-9


def key_material_problem(material: bytes, raw_text: bool = False) -> Optional[str]:
    """Why ``material`` is not a secret seed (None: it is). The seed must be random bytes: some released
    values are functions of it (the bicriteria path releases cell centers of the seed's shifted grids),
    so a seed that can be guessed can be confirmed from the releases, and then every noise draw rebuilt."""
    if len(material) < MIN_SEED_BYTES:
        return f"{len(material)} bytes of key material, fewer than {MIN_SEED_BYTES}"
    if len(set(material)) < MIN_DISTINCT_BYTES:
        return (f"{len(set(material))} distinct byte values in {len(material)} bytes: a pattern, not random "
                f"bytes")
    if raw_text and all(32 <= b < 127 or b in (9, 10, 13) for b in material):
        return "printable text that is not hex or base64: a passphrase, not random bytes"
    return None


def seed_bytes(random_state) -> bytes:
    """Turn ``random_state`` (None, int, bytes) into master-seed bytes.

    ``None`` draws from OS entropy (production).  An int or bytes value gives
    reproducible releases, which is what tests need and what production must
    never use: anyone who knows the seed can subtract the noise, and reusing it
    on other data releases exact differences (P16).
    """
    if random_state is None:
        return seed_from_entropy()
    if isinstance(random_state, (bytes, bytearray)):
        problem = key_material_problem(bytes(random_state), raw_text=True)
        if problem is not None:
            raise ValueError(f"a seed given as bytes must hold at least {MIN_SEED_BYTES} bytes of random key material "
                             f"(e.g. os.urandom({MIN_SEED_BYTES})), got {problem}: such a seed can be searched "
                             f"for offline")
        return bytes(random_state)
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool):
        warnings.warn(
            "random_state is a fixed integer: the noise is reproducible and therefore "
            "NOT private against anyone who knows it. Use it for tests only; leave "
            "random_state=None (OS entropy) or a secret seed file in production.",
            UnsafeSeedWarning,
            stacklevel=3,
        )
        return TestSeed(hashlib.sha256(b"dpstream-int-seed:" + str(int(random_state)).encode()).digest())
    raise ValueError(
        f"random_state must be None, an int (tests only) or >= {MIN_SEED_BYTES} bytes, got "
        f"{type(random_state).__name__}"
    )


def as_seed(seed) -> bytes:
    """``bytes(seed)``, keeping the mark of a :class:`TestSeed`."""
    return seed if isinstance(seed, TestSeed) else bytes(seed)


def fingerprint(seed: bytes) -> str:
    """The fingerprint of a master seed, for the operator's own seed registry and for checking that
    re-attached state gets its seed back. Never released: it would let a guessed seed be confirmed."""
    return hashlib.sha256(b"dpstream-seed-fingerprint:" + bytes(seed)).hexdigest()[:16]


def _encode(part: Hashable) -> bytes:
    # repr of ints/strs/tuples is stable across processes (unlike hash()).
    if isinstance(part, (np.integer,)):
        part = int(part)
    return repr(part).encode()


_ZERO4 = np.zeros(4, dtype=np.uint64)  # Philox's initial counter and buffer
_ZERO4.flags.writeable = False


class NoiseSource:
    """Counter-based generator: ``source.gaussian_int(key, size, sigma)`` etc.

    ``key`` is a tuple ``(component, instance, tick, purpose)``; index ``i`` of
    the returned array is the draw's index.  With ``trace=True`` every key drawn
    is recorded with its size (the noise-key audit of P15).
    """

    def __init__(self, seed: bytes, trace: bool = False, prefix: tuple = ()):
        if not isinstance(seed, (bytes, bytearray)) or len(seed) < 16:
            raise ValueError("NoiseSource needs a secret seed of at least 16 bytes")
        self._seed = as_seed(seed)
        self.test_seed = isinstance(seed, TestSeed)
        self.trace = trace
        # prepended to every key: ("run", r) for run r ≥ 1 (run 0 keeps the bare keys), so the draws
        # of different runs never share a key (P15)
        self.prefix = tuple(prefix)
        self.keys: Counter = Counter()

    # A pickled NoiseSource (an engine held in Beam state, a checkpoint) never carries
    # the secret seed: state can be inspected by whoever operates the runner. The
    # holder re-attaches the seed after loading (``attach_seed``).
    def __getstate__(self):
        d = dict(self.__dict__)
        d.pop("_mac", None)
        d.pop("_scratch", None)
        seed = d.pop("_seed")
        if seed is not None:
            d["_fingerprint"] = fingerprint(seed)
        return d

    def __setstate__(self, d):
        self.__dict__.update(d)
        self._seed = None

    def attach_seed(self, seed: bytes) -> None:
        """Give an unpickled NoiseSource its seed back; refuses a different seed."""
        want = self.__dict__.get("_fingerprint")
        if want is not None and fingerprint(bytes(seed)) != want:
            raise ValueError("attach_seed: this is not the seed the state was created with")
        self._seed = as_seed(seed)
        self.__dict__.pop("_mac", None)

    def _key_words(self, key: tuple, size: int) -> np.ndarray:
        """The Philox key of a draw: the first 128 bits of HMAC-SHA256(seed, key)."""
        if self._seed is None:
            raise RuntimeError("this NoiseSource was unpickled without its seed: call attach_seed first")
        key = self.__dict__.get("prefix", ()) + tuple(key)
        if self.trace:
            self.keys[(key, int(size))] += 1
        msg = b"\x1f".join(_encode(p) for p in key)
        mac = self.__dict__.get("_mac")
        if mac is None:  # the keyed HMAC state, copied per draw (not pickled: it holds the seed)
            mac = self._mac = hmac.new(self._seed, digestmod=hashlib.sha256)
        h = mac.copy()
        h.update(msg)
        return np.frombuffer(h.digest(), dtype=np.uint64)[:2]

    def generator(self, key: tuple, size: int = 0) -> np.random.Generator:
        bg = np.random.Philox(key=self._key_words(key, size), counter=np.array([0, 0, 0, 0], dtype=np.uint64))
        return np.random.Generator(bg)

    def _drawing(self, key: tuple, size: int) -> np.random.Generator:
        """What :meth:`generator` returns, for a draw made at once and never kept: one Philox per
        thread, reset to the key's initial state (equal to a new ``Philox(key=…, counter=0)``: zero
        counter, empty buffer) instead of a new one: 2 µs instead of 20 per draw, ~20,000 draws per
        run of the Beam job at T = 1000."""
        words = self._key_words(key, size)
        local = self.__dict__.get("_scratch")
        if local is None:  # per thread: a draw never shares its generator (not pickled)
            local = self._scratch = threading.local()
        bg = getattr(local, "bg", None)
        if bg is None:
            bg = local.bg = np.random.Philox(key=words, counter=np.array([0, 0, 0, 0], dtype=np.uint64))
            local.gen = np.random.Generator(bg)
        else:
            bg.state = {"bit_generator": "Philox", "state": {"counter": _ZERO4, "key": words},
                        "buffer": _ZERO4, "buffer_pos": 4, "has_uint32": 0, "uinteger": 0}
        return local.gen

    # -- draws -------------------------------------------------------------
    def gaussian(self, key: tuple, size, sigma: float) -> np.ndarray:
        """Continuous Gaussian noise; only for values that are never released."""
        n = int(np.prod(size))
        return self._drawing(key, n).normal(0.0, sigma, size)

    def gaussian_int(self, key: tuple, size, sigma: float) -> np.ndarray:
        """Rounded Gaussian noise (int64): post-processing of the Gaussian mechanism."""
        n = int(np.prod(size))
        return np.rint(self._drawing(key, n).normal(0.0, sigma, size)).astype(np.int64)

    def discrete_laplace(self, key: tuple, size, scale: float) -> np.ndarray:
        """Discrete Laplace with pmf ∝ exp(-|k|/scale), as G1 - G2 of two geometrics."""
        n = int(np.prod(size))
        g = self._drawing(key, n)
        p = -np.expm1(-1.0 / scale)
        return (g.geometric(p, size) - g.geometric(p, size)).astype(np.int64)

    def laplace(self, key: tuple, size, scale: float) -> np.ndarray:
        """Continuous Laplace; only for values that are never released (SVT noise)."""
        n = int(np.prod(size))
        return self._drawing(key, n).laplace(0.0, scale, size)

    def uniform(self, key: tuple, size, low=0.0, high=1.0) -> np.ndarray:
        n = int(np.prod(size))
        return self._drawing(key, n).uniform(low, high, size)

    def integers(self, key: tuple, size, low, high) -> np.ndarray:
        n = int(np.prod(size))
        return self._drawing(key, n).integers(low, high, size)

    def int_noise(self, key: tuple, size, mechanism: str, scale: float) -> np.ndarray:
        """Integer noise of the mechanism named in the privacy plan (``scale``: one, or one per coordinate)."""
        if mechanism == "gaussian":
            return self.gaussian_int(key, size, scale)
        if mechanism == "discrete_laplace":
            return self.discrete_laplace(key, size, scale)
        raise ValueError(f"unknown noise mechanism {mechanism!r}")
