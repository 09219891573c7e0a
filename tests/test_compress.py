"""Gradient compressors: round trips, bytes on the wire, unbiasedness, QSGD's variance bound, error feedback."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

from edgelab.common.errors import ConfigError
from edgelab.sync.compress import (
    QSGD,
    TERNGRAD_CLIP_STD,
    Compressor,
    build_compressor,
    compress_with_feedback,
    kept_count,
)

SPECS = ["sign", "sign_ef", "terngrad", "terngrad_noclip", "qsgd:1", "qsgd:4", "qsgd:256", "topk:0.1", "randomk:0.3"]
LENET_MLP = [(784, 128), (128,), (128, 64), (64,), (64, 10), (10,)]  # 109,386 parameters
FRAMING = 1024  # bytes the pickle adds around the arrays, at most (measured: about 420)


def _delta(shapes: list[tuple[int, ...]], seed: int = 0, dtype: type = np.float32) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(0.01 * rng.standard_normal(s)).astype(dtype) for s in shapes]


def _build(spec: str) -> Compressor:
    c = build_compressor(spec)
    assert c is not None
    return c


@pytest.mark.parametrize("spec", SPECS)
def test_decode_gives_back_the_shapes_and_dtypes_and_a_pickle_decodes_alike(spec: str) -> None:
    # Prepare: mixed dtypes, a scalar and an empty tensor among them
    arrays = [*_delta([(3, 4), (5,)]), np.float64(2.5) * np.ones(()), np.zeros((0, 3), np.float32)]
    c = _build(spec)

    encoded = c.encode(arrays, np.random.default_rng(1))
    decoded, wired = c.decode(encoded), c.decode(pickle.loads(pickle.dumps(encoded)))

    assert c.name == spec
    assert [(a.shape, a.dtype) for a in decoded] == [(a.shape, a.dtype) for a in arrays]
    for a, b in zip(decoded, wired, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("spec", SPECS)
def test_the_same_rng_seed_gives_the_same_bytes(spec: str) -> None:
    arrays = _delta([(20, 7), (7,)])
    c = _build(spec)

    first, second = (c.encode(arrays, np.random.default_rng(5)) for _ in range(2))

    assert pickle.dumps(first) == pickle.dumps(second)


def _max_bytes(spec: str, n: int) -> float:
    """What the arrays of one encoded LeNet-MLP delta take, by the scheme's arithmetic."""
    if spec.startswith("sign"):
        return n / 8 + 4 * len(LENET_MLP)  # 1 bit each, a float32 scale per tensor
    if spec.startswith("terngrad"):
        return n * 2 / 8 + 4 * len(LENET_MLP)  # 2 bits each
    if spec.startswith("qsgd"):
        return n * (int(spec[5:]).bit_length() + 1) / 8 + 4 * len(LENET_MLP)  # level bits and a sign bit
    if spec.startswith("topk"):
        return 8 * sum(kept_count(float(spec[5:]), math.prod(s)) for s in LENET_MLP)  # int32 index, float32 value
    return 4 * n * float(spec[8:]) * 1.05  # random-k: kept float32 values (a binomial count: 5% slack)


@pytest.mark.parametrize("spec", [*SPECS, "qsgd:2", "qsgd:16", "topk:0.01", "topk:0.001", "randomk:0.01"])
def test_an_encoded_lenet_mlp_delta_pickles_to_its_scheme_s_share_of_fp32(spec: str) -> None:
    delta = _delta(LENET_MLP)
    n = sum(a.size for a in delta)
    dense = len(pickle.dumps(delta))

    wire = len(pickle.dumps(_build(spec).encode(delta, np.random.default_rng(0))))

    assert n == 109_386 and dense >= 4 * n
    assert wire <= _max_bytes(spec, n) + FRAMING
    if spec.startswith("sign"):
        assert dense / wire > 30  # ~1/32
    if spec.startswith("terngrad"):
        assert dense / wire > 15.5  # <= 1/16 plus framing


def test_sign_with_error_feedback_sends_everything_eventually() -> None:
    # Prepare: ten rounds of deltas on the same two tensors
    c = _build("sign_ef")
    rng = np.random.default_rng(0)
    deltas = [_delta([(30, 5), (5,)], seed=r) for r in range(10)]
    residual, sent = None, [np.zeros((30, 5)), np.zeros(5)]

    # Execute
    for delta in deltas:
        encoded, residual = compress_with_feedback(c, delta, residual, rng)
        sent = [s + d for s, d in zip(sent, c.decode(encoded), strict=True)]

    # Assert: what was decoded plus what is still kept is what was meant, element by element
    assert residual is not None
    meant = [sum(d[i].astype(np.float64) for d in deltas) for i in range(2)]
    for s, r, m in zip(sent, residual, meant, strict=True):
        np.testing.assert_allclose(s + r, m, rtol=0, atol=1e-6)
    # and without feedback nothing is kept
    assert compress_with_feedback(_build("sign"), deltas[0], None, rng)[1] is None


def test_sign_sends_the_sign_and_the_mean_magnitude() -> None:
    x = np.array([0.5, -1.0, 2.0, -0.5], np.float32)

    (decoded,) = _build("sign").decode(_build("sign").encode([x], np.random.default_rng(0)))

    np.testing.assert_array_equal(decoded, np.float32([1.0, -1.0, 1.0, -1.0]))


def _mean_of_draws(spec: str, x: np.ndarray, draws: int) -> np.ndarray:
    c, rng = _build(spec), np.random.default_rng(42)
    return np.mean([c.decode(c.encode([x], rng))[0] for _ in range(draws)], axis=0)


DRAWS = 4000
SIGMAS = 5  # each coordinate's mean within 5 standard errors (seeded: the draws are the same on every run)


def test_qsgd_terngrad_and_randomk_are_unbiased() -> None:
    x = np.random.default_rng(3).standard_normal(40)
    norm, top, p = np.linalg.norm(x), np.abs(x).max(), 0.3

    # Assert: per coordinate, the estimator's standard deviation over sqrt(DRAWS), times SIGMAS
    for s in (1, 4):
        # a QSGD coordinate is norm/s times a Bernoulli around its level: variance at most (norm/s)^2/4
        tol = SIGMAS * norm / (2 * s * math.sqrt(DRAWS))
        np.testing.assert_allclose(_mean_of_draws(f"qsgd:{s}", x, DRAWS), x, rtol=0, atol=tol)
    # TernGrad without clipping: scale max|x| times a Bernoulli
    tol = SIGMAS * top / (2 * math.sqrt(DRAWS))
    np.testing.assert_allclose(_mean_of_draws("terngrad_noclip", x, DRAWS), x, rtol=0, atol=tol)
    # random-k: x/p with probability p, variance x^2 (1-p)/p
    tol = SIGMAS * np.abs(x) * math.sqrt((1 - p) / p) / math.sqrt(DRAWS) + 1e-7
    assert np.all(np.abs(_mean_of_draws(f"randomk:{p}", x, DRAWS) - x) <= tol)


def test_terngrad_with_clipping_is_unbiased_for_the_clipped_gradient_not_the_outlier() -> None:
    # Prepare: one outlier far past 2.5 standard deviations
    x = np.random.default_rng(4).standard_normal(60) * 0.1
    x[7] = 10.0
    bound = TERNGRAD_CLIP_STD * x.std()
    clipped = np.clip(x, -bound, bound)

    mean = _mean_of_draws("terngrad", x, DRAWS)

    np.testing.assert_allclose(mean, clipped, rtol=0, atol=SIGMAS * bound / (2 * math.sqrt(DRAWS)))
    assert mean[7] < 0.5 * x[7]


@pytest.mark.parametrize("levels", [1, 2, 4, 16])
def test_qsgd_variance_is_the_rounding_variance_and_within_the_paper_s_bound(levels: int) -> None:
    # Prepare: Alistarh et al. Lemma 3.1: E||Q(x) - x||^2 <= min(n/s^2, sqrt(n)/s) ||x||^2
    x = np.random.default_rng(levels).standard_normal(100)
    n, norm2 = x.size, float(x @ x)
    remainder = np.abs(x) / math.sqrt(norm2) * levels % 1
    exact = norm2 / levels**2 * float(np.sum(remainder * (1 - remainder)))  # Bernoulli rounding variance
    c, rng = QSGD(levels=levels), np.random.default_rng(0)

    errors = [float(np.sum((c.decode(c.encode([x], rng))[0] - x) ** 2)) for _ in range(2000)]

    assert exact <= min(n / levels**2, math.sqrt(n) / levels) * norm2
    # the mean of 2000 squared errors: within 10% of the analytic variance
    assert np.mean(errors) == pytest.approx(exact, rel=0.1)


@pytest.mark.parametrize("density", [0.5, 0.1, 0.01])
def test_topk_keeps_the_ceil_of_density_times_n_largest_and_the_rest_stays_in_the_residual(density: float) -> None:
    # Prepare: distinct magnitudes, so the largest ones are one set
    rng = np.random.default_rng(0)
    arrays = [rng.permutation(np.arange(1, 301, dtype=np.float32)).reshape(30, 10) * rng.choice([-1, 1], (30, 10))]
    arrays.append(np.float32([3.0, -7.0, 1.0]))
    c = _build(f"topk:{density}")

    encoded, residual = compress_with_feedback(c, arrays, None, rng)
    decoded = c.decode(encoded)

    assert residual is not None and c.error_feedback
    for x, d, r in zip(arrays, decoded, residual, strict=True):
        k = math.ceil(density * x.size)
        largest = np.sort(np.abs(x).ravel())[-k:]
        assert np.count_nonzero(d) == k
        np.testing.assert_array_equal(np.sort(np.abs(d[d != 0])), largest)
        np.testing.assert_array_equal(r + d, x)
    # at least one element of a non-empty tensor, none of an empty one
    assert (kept_count(density, 10), kept_count(density, 0)) == (math.ceil(density * 10), 0)


def test_randomk_keeps_about_p_of_the_coordinates_rescaled() -> None:
    x = np.random.default_rng(0).standard_normal(20_000).astype(np.float32)
    c = _build("randomk:0.05")

    (decoded,) = c.decode(c.encode([x], np.random.default_rng(1)))

    kept = decoded != 0
    # binomial(20000, 0.05): mean 1000, standard deviation 31
    assert abs(int(kept.sum()) - 1000) < 5 * 31
    np.testing.assert_allclose(decoded[kept], x[kept] / 0.05, rtol=1e-6)


def test_none_builds_no_compressor() -> None:
    assert build_compressor("none") is None


@pytest.mark.parametrize(
    "spec",
    [
        "bogus",
        "sign:1",
        "qsgd",
        "qsgd:0",
        "qsgd:257",
        "qsgd:2.5",
        "topk:0",
        "topk:1.5",
        "randomk:-0.1",
        "dgc:0.1",
        "dgc:0.1:1.0",
        "dgc:0:0.9",
        3,
    ],
)
def test_a_bad_spec_names_the_parameter_the_value_and_what_is_allowed(spec: object) -> None:
    with pytest.raises(ConfigError) as caught:
        build_compressor(spec)  # type: ignore[arg-type]

    assert caught.value.parameter == "compressor" and caught.value.value == spec
    assert "qsgd:<s>" in caught.value.allowed and "(0, 1]" in caught.value.allowed


def _rounds(spec: str, n: int, seed: int = 0) -> list[tuple[object, object]]:
    """``n`` rounds of random LeNet-MLP-shaped deltas through ``spec`` with its residual: (encoded, residual) each."""
    c, state, out = _build(spec), None, []
    for t in range(n):
        encoded, state = compress_with_feedback(c, _delta(LENET_MLP, seed + t), state, np.random.default_rng(t))
        out.append((encoded, state))
    return out


def test_dgc_without_momentum_is_top_k_with_its_residual_bit_for_bit() -> None:
    dgc, topk = _rounds("dgc:0.01:0", 5), _rounds("topk:0.01", 5)
    for (sent, (kept, _)), (reference, residual) in zip(dgc, topk, strict=True):
        for a, b in zip((*sent.arrays, *kept), (*reference.arrays, *residual), strict=True):
            np.testing.assert_array_equal(a, b)


def test_dgc_sends_the_accumulated_velocity_and_masks_both_where_it_sent() -> None:
    # Prepare: the velocity and accumulation DGC's section 3.2 defines, tracked alongside in float64
    m, c = 0.9, _build("dgc:0.01:0.9")
    u = v = None
    sent_total = np.zeros(sum(math.prod(s) for s in LENET_MLP))
    velocity_total = np.zeros_like(sent_total)
    state = None
    for t in range(6):
        delta = _delta(LENET_MLP, t)
        flat = np.concatenate([d.ravel() for d in delta]).astype(np.float64)
        u = flat if u is None else m * u + flat
        v = u if v is None else v + u
        velocity_total += u

        encoded, state = compress_with_feedback(c, delta, state, np.random.default_rng(t))
        kept, velocity = (np.concatenate([a.ravel() for a in part]) for part in state)
        index = encoded.arrays[0]

        # Assert: what was sent is v there, and u and v are cleared exactly there (momentum factor masking)
        np.testing.assert_allclose(encoded.arrays[1], v[index], rtol=1e-5, atol=1e-7)
        assert not kept[index].any() and not velocity[index].any()
        sent_total[index] += encoded.arrays[1]
        u[index] = 0.0
        v[index] = 0.0
        np.testing.assert_allclose(kept, v, rtol=1e-5, atol=1e-7)
    # Nothing is lost: sent plus still kept is every round's velocity, summed
    np.testing.assert_allclose(sent_total + kept, velocity_total, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_dgc_at_full_density_sends_each_delta_as_it_is(momentum: float) -> None:
    c, state = _build(f"dgc:1:{momentum}"), None
    for t in range(3):
        delta = _delta(LENET_MLP, t)
        encoded, state = compress_with_feedback(c, delta, state, np.random.default_rng(t))
        for got, want in zip(c.decode(encoded), delta, strict=True):
            np.testing.assert_array_equal(got, want)


def test_esgd_draws_its_first_coordinates_by_weight_size() -> None:
    # Prepare: half the weights large, half next to zero
    c = _build("esgd:0.1")
    weights = [np.where(np.arange(1000) % 2 == 0, 1.0, 1e-6).astype(np.float32)]

    encoded, (residual, index, loss) = c.compress(_delta([(1000,)]), None, np.random.default_rng(0), loss=1.0,
                                                  weights=weights)  # fmt: skip

    assert len(index) == kept_count(0.1, 1000) == 100
    assert np.mean(index % 2 == 0) >= 0.99  # drawn with probability proportional to |w|
    assert loss == 1.0 and encoded.arrays[0] is index


def test_esgd_keeps_its_coordinates_while_the_loss_falls_and_draws_anew_when_it_does_not() -> None:
    c, rng = _build("esgd:0.05"), np.random.default_rng(1)
    weights = _delta(LENET_MLP, 9)
    first, state = c.compress(_delta(LENET_MLP, 0), None, rng, loss=2.0, weights=weights)
    second, state = c.compress(_delta(LENET_MLP, 1), state, rng, loss=1.5, weights=weights)
    third, state = c.compress(_delta(LENET_MLP, 2), state, rng, loss=1.6, weights=weights)

    np.testing.assert_array_equal(first.arrays[0], second.arrays[0])  # the loss fell: the same coordinates
    assert not np.array_equal(second.arrays[0], third.arrays[0])  # it rose: a new draw
    assert [a.size for a in third.arrays] == [a.size for a in _build("topk:0.05").encode(weights, rng).arrays]


def test_esgd_keeps_what_it_did_not_send_exactly() -> None:
    c, rng = _build("esgd:0.01"), np.random.default_rng(2)
    weights, residual = _delta(LENET_MLP, 7), _delta(LENET_MLP, 8)
    delta = _delta(LENET_MLP, 3)

    encoded, (kept, _, _) = c.compress(delta, (residual, None, None), rng, loss=1.0, weights=weights)

    for sent, left, d, r in zip(c.decode(encoded), kept, delta, residual, strict=True):
        np.testing.assert_array_equal(sent + left, d + r)


def test_esgd_needs_the_weights_to_draw() -> None:
    with pytest.raises(ValueError, match="weights"):
        _build("esgd:0.1").compress(_delta(LENET_MLP), None, np.random.default_rng(0), loss=1.0)
