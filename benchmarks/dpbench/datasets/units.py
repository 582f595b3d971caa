"""Streams whose records carry a privacy unit: GPS-like users and embeddings by author.

Not in the registry (its streams have no privacy ids): :mod:`benchmarks.user_level` runs them. Each
generator returns ``(X, ids, meta)`` in stream order, with the public radius rule in ``meta``.

* :func:`gps_users`: ``users`` people on a 300 km × 300 km map (km), ``cities`` city centers. A person
  lives near one city (chosen with the cities' populations) and has 2–3 personal places within a few km
  of it (home, work, one more for a third of them); their record counts are heavy-tailed (lognormal,
  1 to thousands, summing to ``n``). Records come in visits: each person's records are spread over the
  stream's span in time order and stay at one place for a visit (about a day of a month-long stream),
  with 30 m GPS jitter, so a person's records of one tick are usually at one place. ``heavy`` > 0 adds
  one person with that share of all records, at two places in the countryside away from every city
  (the "own center" test). The public rule: the map is the box [−150, 150]² km, Λ = 150·√2, center 0.
* :func:`author_embeddings`: ``authors`` authors writing unit-norm ``d``-dim embeddings around
  ``k`` topic directions; an author writes on 1–2 topics, heavy-tailed document counts. Λ = 1.
"""
from __future__ import annotations

import math

import numpy as np


def _heavy_tailed_counts(rng, units: int, n: int, sigma: float, cap: int) -> np.ndarray:
    """Counts ≥ 1 summing to n, lognormal shape, none above ``cap`` (surplus re-spread over the others)."""
    w = rng.lognormal(0.0, sigma, size=units)
    c = 1 + np.floor((n - units) * w / w.sum()).astype(np.int64)
    c = np.minimum(c, cap)
    short = n - int(c.sum())
    while short > 0:  # spread the rest over those below the cap, by weight
        room = c < cap
        add = rng.multinomial(short, w * room / (w * room).sum())
        c = np.minimum(c + add, cap)
        short = n - int(c.sum())
    return c


def _visits_stream(rng, counts, places_of, n_places, jitter, visits):
    """Records of every unit in one global time order: unit u's records at uniform times in [0, 1), each
    at the place of its visit (visits of 1/visits of the span, a random place of the unit per visit)."""
    units = np.repeat(np.arange(counts.size), counts)
    times = rng.random(units.size)
    visit = np.floor(times * visits).astype(np.int64)
    # a place per (unit, visit): a hash-free draw, one uniform per (unit, visit) pair seen
    key = units * visits + visit
    uk, inv = np.unique(key, return_inverse=True)
    choice = np.floor(rng.random(uk.size) * n_places[uk // visits]).astype(np.int64)
    place = places_of[units, choice[inv]]
    X = place + rng.normal(scale=jitter, size=place.shape)
    order = np.argsort(times, kind="stable")
    return X[order], units[order]


def gps_users(n: int = 1_000_000, users: int = 10_000, cities: int = 8, seed: int = 0, heavy: float = 0.0):
    rng = np.random.default_rng(seed + 1717)
    half = 150.0
    centers = rng.uniform(-0.8 * half, 0.8 * half, size=(cities, 2))
    pop = rng.dirichlet(np.full(cities, 2.0))
    city = rng.choice(cities, size=users, p=pop)
    n_places = np.where(rng.random(users) < 1 / 3, 3, 2)
    # personal places: within a few km of the city center (σ 4 km), at most 3 per person
    places = centers[city][:, None, :] + rng.normal(scale=4.0, size=(users, 3, 2))
    n_heavy = int(round(heavy * n))
    counts = _heavy_tailed_counts(rng, users, n - n_heavy, sigma=1.6, cap=5000)
    meta = {}
    if n_heavy:
        # the heavy person: two places 30 km from the nearest city, in the countryside
        far = None
        while far is None:
            p = rng.uniform(-0.8 * half, 0.8 * half, size=2)
            if np.min(np.linalg.norm(centers - p, axis=1)) >= 30.0:
                far = p
        hp = np.stack([far, far + [1.5, -1.0], far + [1.5, -1.0]])
        places = np.concatenate([places, hp[None]])
        n_places = np.r_[n_places, 2]
        counts = np.r_[counts, n_heavy]
        meta["heavy_places"] = hp[:2]
        meta["heavy_id"] = users
    X, ids = _visits_stream(rng, counts, places, n_places, jitter=0.03, visits=30)
    meta.update(k=cities, radius=half * math.sqrt(2.0), center=np.zeros(2), city_centers=centers,
                counts=counts,
                rule=(f"the map is the public box [−{half:g}, {half:g}]² km: Λ = {half:g}·√2 = "
                      f"{half * math.sqrt(2):.3f}, center 0"))
    return X, ids, meta


def author_embeddings(n: int = 200_000, authors: int = 5_000, d: int = 32, k: int = 10, seed: int = 0):
    rng = np.random.default_rng(seed + 2929)
    topics = rng.normal(size=(k, d))
    topics /= np.linalg.norm(topics, axis=1, keepdims=True)
    t1 = rng.integers(0, k, size=authors)
    t2 = np.where(rng.random(authors) < 0.5, rng.integers(0, k, size=authors), t1)
    counts = _heavy_tailed_counts(rng, authors, n, sigma=1.4, cap=3000)
    units = np.repeat(np.arange(authors), counts)
    rng.shuffle(units)
    topic = np.where(rng.random(units.size) < 0.5, t1[units], t2[units])
    style = rng.normal(scale=0.15, size=(authors, d))  # an author's own offset
    X = topics[topic] + style[units] + rng.normal(scale=0.25, size=(units.size, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, units, dict(k=k, radius=1.0, center=np.zeros(d), counts=counts,
                          rule="unit-norm embeddings: Λ = 1, center 0")
