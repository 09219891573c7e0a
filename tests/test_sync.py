"""Tests for edgelab.sync: weighted averaging and the parameter-server strategy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from edgelab.common.errors import ConfigError
from edgelab.sync import DeviceUpdate, ParameterServerSync, build_strategy
from edgelab.sync.aggregate import apply_delta, weighted_mean

SHAPES = [(3, 2), (2,), (1, 4, 2)]


def _client(rng: np.random.Generator) -> list[np.ndarray]:
    """One client's layers: random float32 arrays of SHAPES."""
    return [rng.standard_normal(s).astype(np.float32) for s in SHAPES]


# ---------------------------------------------------------------- weighted_mean


@pytest.mark.parametrize("n_clients", [1, 2, 3, 4, 5])
def test_weighted_mean_equals_numpy_average(n_clients: int) -> None:
    # Prepare
    rng = np.random.default_rng(n_clients)
    clients = [_client(rng) for _ in range(n_clients)]
    weights = rng.integers(1, 100, n_clients).tolist()

    # Execute
    result = weighted_mean(clients, weights)

    # Assert
    assert len(result) == len(SHAPES)
    for layer, got in enumerate(result):
        expected = np.average(np.stack([c[layer] for c in clients]), axis=0, weights=weights)
        assert got.dtype == np.float32
        assert got.shape == SHAPES[layer]
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("n_clients", [1, 2, 10])
def test_the_mean_delta_applied_is_bit_for_bit_the_plain_formula(n_clients: int) -> None:
    # apply_delta skips multiplying by 1.0: the same bits as the plain formula, signed zeros included.
    rng = np.random.default_rng(n_clients)
    arrays = [
        [rng.standard_normal((30, 7)).astype(np.float32) * 1e-3, np.array([0.0, -0.0, 1.0], np.float32)]
        for _ in range(n_clients)
    ]
    weights = [int(s) for s in rng.integers(1, 100, n_clients)]
    base = [rng.standard_normal((30, 7)).astype(np.float32), np.array([-0.0, 0.0, 2.0], np.float32)]

    total = float(sum(weights))
    plain = [
        (sum(w * layer.astype(np.float64) for w, layer in zip(weights, layers, strict=True)) / total).astype(np.float32)
        for layers in zip(*arrays, strict=True)
    ]
    got = weighted_mean(arrays, weights)
    applied = apply_delta(base, got)

    for mine, ref in zip(got, plain, strict=True):
        assert mine.dtype == ref.dtype
        np.testing.assert_array_equal(mine.view(np.int32), ref.view(np.int32))
    for mine, b, ref in zip(applied, base, plain, strict=True):
        np.testing.assert_array_equal(mine.view(np.int32), (b + 1.0 * ref).astype(np.float32).view(np.int32))


def test_weighted_mean_hand_computed() -> None:
    # Prepare
    a = [np.array([0.0, 10.0]), np.array([[1.0]])]
    b = [np.array([3.0, 4.0]), np.array([[4.0]])]

    # Execute
    result = weighted_mean([a, b], [1, 2])

    # Assert: (1*a + 2*b) / 3
    np.testing.assert_allclose(result[0], [2.0, 6.0])
    np.testing.assert_allclose(result[1], [[3.0]])


@pytest.mark.parametrize("n_clients", [1, 2, 5])
def test_identical_clients_return_that_client(n_clients: int) -> None:
    # Prepare
    one = _client(np.random.default_rng(7))
    weights = list(range(1, n_clients + 1))

    # Execute
    result = weighted_mean([one] * n_clients, weights)

    # Assert
    for got, expected in zip(result, one, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-6)


@pytest.mark.parametrize(
    ("arrays", "weights"),
    [([], []), ([[np.zeros(2)]], [1, 2]), ([[np.zeros(2)], [np.ones(2)]], [0, 0])],
)
def test_weighted_mean_rejects_bad_input(arrays: list[list[np.ndarray]], weights: list[float]) -> None:
    # Execute / Assert
    with pytest.raises(ValueError):
        weighted_mean(arrays, weights)


def test_apply_delta_scales_and_keeps_dtype() -> None:
    # Prepare
    w = [np.array([1.0, 2.0], dtype=np.float32)]
    d = [np.array([0.5, -1.0], dtype=np.float32)]

    # Execute
    out = apply_delta(w, d, scale=2.0)

    # Assert
    np.testing.assert_allclose(out[0], [2.0, 0.0])
    assert out[0].dtype == np.float32


# ---------------------------------------------------------------- ParameterServerSync


@pytest.mark.parametrize("n_devices", [1, 2, 4])
def test_aggregate_equals_weights_plus_mean_delta(n_devices: int) -> None:
    # Prepare: equal samples, so the weighted mean is the plain mean
    rng = np.random.default_rng(100 + n_devices)
    weights = _client(rng)
    deltas = [_client(rng) for _ in range(n_devices)]
    updates = [DeviceUpdate(f"pi3b-{i}", d, 32) for i, d in enumerate(deltas)]

    # Execute
    new = ParameterServerSync().aggregate(weights, updates)

    # Assert
    assert new is not None
    for layer, got in enumerate(new):
        expected = weights[layer] + np.mean([d[layer] for d in deltas], axis=0)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_aggregate_weights_by_samples() -> None:
    # Prepare
    weights = [np.array([0.0])]
    updates = [DeviceUpdate("a", [np.array([1.0])], 1), DeviceUpdate("b", [np.array([4.0])], 3)]

    # Execute
    new = ParameterServerSync().aggregate(weights, updates)

    # Assert: (1*1 + 3*4) / 4
    assert new is not None
    np.testing.assert_allclose(new[0], [3.25])


def test_aggregate_ignores_zero_sample_updates() -> None:
    # Prepare: a huge delta with 0 samples must not move anything
    weights = [np.array([1.0, 1.0])]
    updates = [
        DeviceUpdate("a", [np.array([2.0, 4.0])], 10),
        DeviceUpdate("b", [np.array([1e6, 1e6])], 0),
    ]

    # Execute
    new = ParameterServerSync().aggregate(weights, updates)

    # Assert
    assert new is not None
    np.testing.assert_allclose(new[0], [3.0, 5.0])


@pytest.mark.parametrize("n_devices", [0, 1, 3])
def test_aggregate_all_zero_samples_returns_none(n_devices: int) -> None:
    # Prepare
    weights = [np.array([1.0])]
    updates = [DeviceUpdate(str(i), [np.array([5.0])], 0) for i in range(n_devices)]

    # Execute
    new = ParameterServerSync().aggregate(weights, updates)

    # Assert
    assert new is None


def test_server_learning_rate_scales_mean_delta() -> None:
    # Prepare
    weights = [np.array([1.0])]
    updates = [DeviceUpdate("a", [np.array([2.0])], 1)]

    # Execute
    new = ParameterServerSync(server_learning_rate=0.5).aggregate(weights, updates)

    # Assert
    assert new is not None
    np.testing.assert_allclose(new[0], [2.0])


def test_server_momentum_accumulates_mean_deltas_over_rounds() -> None:
    # Prepare: two devices, three rounds of hand-chosen deltas
    ps = ParameterServerSync(momentum=0.5)
    weights = [np.array([0.0, 10.0])]
    rounds = [
        ([np.array([2.0, 0.0])], [np.array([0.0, 0.0])]),  # mean (1, 0)
        ([np.array([0.0, 2.0])], [np.array([0.0, 2.0])]),  # mean (0, 2)
        ([np.array([-4.0, 0.0])], [np.array([0.0, 0.0])]),  # mean (-2, 0)
    ]

    # Execute
    seen = []
    for a, b in rounds:
        weights = ps.aggregate(weights, [DeviceUpdate("a", a, 1), DeviceUpdate("b", b, 1)])
        seen.append(weights[0].tolist())

    # Assert: v1 = (1, 0); v2 = 0.5 v1 + (0, 2) = (0.5, 2); v3 = 0.5 v2 + (-2, 0) = (-1.75, 1)
    assert seen == [[1.0, 10.0], [1.5, 12.0], [-0.25, 13.0]]


def test_zero_momentum_is_plain_averaging_every_round() -> None:
    # Prepare
    rng = np.random.default_rng(7)
    weights = _client(rng)
    deltas = [_client(rng) for _ in range(3)]

    # Execute: the same delta three rounds running
    plain, stateless = ParameterServerSync(momentum=0.0), weights
    for d in deltas:
        stateless = apply_delta(stateless, d)
        weights = plain.aggregate(weights, [DeviceUpdate("a", d, 1)])

    # Assert
    for got, expected in zip(weights, stateless, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-6)


@pytest.mark.parametrize("momentum", [-0.1, 1.0, 1.5])
def test_momentum_outside_unit_interval_raises(momentum: float) -> None:
    # Execute / Assert
    with pytest.raises(ConfigError, match="momentum") as info:
        ParameterServerSync(momentum=momentum)
    assert info.value.allowed == "a number in [0, 1)"


@pytest.mark.parametrize("n_params", [0, 1, 10, 109386])
def test_bytes_per_round_is_four_bytes_per_param_each_way(n_params: int) -> None:
    # Execute / Assert
    assert ParameterServerSync().bytes_per_round(n_params) == (4 * n_params, 4 * n_params)
    assert ParameterServerSync().bytes_per_round(n_params, dtype_bytes=2) == (2 * n_params, 2 * n_params)


@pytest.mark.parametrize("sync_every", ["step", "", "Batch"])
def test_bad_sync_every_raises(sync_every: str) -> None:
    # Execute / Assert
    with pytest.raises(ConfigError, match="sync_every") as info:
        ParameterServerSync(sync_every=sync_every)
    assert info.value.parameter == "sync_every"


@pytest.mark.parametrize("sync_every", ["batch", "epoch"])
def test_build_strategy_ps_sync(sync_every: str) -> None:
    # Execute
    strategy = build_strategy("ps_sync", sync_every=sync_every)

    # Assert
    assert isinstance(strategy, ParameterServerSync)
    assert strategy.sync_every == sync_every


def test_build_strategy_unknown_raises() -> None:
    # Execute / Assert
    with pytest.raises(ConfigError, match="strategy") as info:
        build_strategy("allreduce")
    assert info.value.parameter == "strategy"


@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_flat_lists_aggregate_bit_for_bit_as_the_layers_do(scale: float) -> None:
    from edgelab.common.wire import Flat, pack

    # Prepare: three devices' deltas (with negative zeros, which a sum from 0 turns positive) and the weights
    rng = np.random.default_rng(5)
    shapes = [(4, 3), (3,), (3, 2), (2,)]
    deltas = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(3)]
    deltas[0][1][0] = deltas[1][1][0] = deltas[2][1][0] = np.float32(-0.0)
    weights = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    samples = [64, 64, 17]

    # Execute: the same maths on plain lists and on flat ones
    by_layer = apply_delta(weights, weighted_mean(deltas, samples), scale=scale)
    flat_mean = weighted_mean([Flat(*pack(d)) for d in deltas], samples)
    by_buffer = apply_delta(Flat(*pack(weights)), flat_mean, scale=scale)

    # Assert: flat in, flat out, and the same bits
    assert isinstance(flat_mean, Flat) and isinstance(by_buffer, Flat)
    for got, want in zip(by_buffer, by_layer, strict=True):
        assert got.shape == want.shape
        np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))


# ---------------------------------------------------------------- RunningMean


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_running_mean_in_any_order_is_the_weighted_mean_bit_for_bit(seed: int) -> None:
    from edgelab.common.wire import Flat, pack
    from edgelab.sync.aggregate import RunningMean

    # Prepare: five deltas, some flat and some plain (negative zeros and subnormals in), one with nothing to count
    rng = np.random.default_rng(seed)
    deltas = [[rng.standard_normal(s).astype(np.float32) * 1e-3 for s in SHAPES] for _ in range(5)]
    for d in deltas:
        d[1][0], d[0][0, 0] = np.float32(-0.0), np.float32(-1e-45)
    handed = [Flat(*pack(d)) if i % 2 == 0 else d for i, d in enumerate(deltas)]
    samples = [int(s) for s in rng.integers(1, 100, 5)]
    samples[3] = 0

    # Execute: handed over in a random order, the empty one skipped
    running = RunningMean(5)
    for i in rng.permutation(5):
        if samples[i]:
            running.add(int(i), handed[i], samples[i])
        else:
            running.skip(int(i))

    # Assert: the mean of the others, in index order, to the bit
    kept = [i for i in range(5) if samples[i]]
    want = weighted_mean([deltas[i] for i in kept], [samples[i] for i in kept])
    assert running.folded == 4
    for got, ref in zip(running.result(), want, strict=True):
        assert got.dtype == ref.dtype and got.shape == ref.shape
        np.testing.assert_array_equal(got.view(np.int32), ref.view(np.int32))


def _hard_lists(dtype: type, n: int = 5) -> list[list[np.ndarray]]:
    """Lists of two arrays with negative zeros, subnormals, values near float32's largest and cancellations."""
    rng = np.random.default_rng(11)
    lists = []
    for i in range(n):
        flat = (rng.standard_normal(4000) * 10.0 ** rng.integers(-30, 30, 4000)).astype(dtype)
        flat[:50] = -0.0
        flat[50:60] = np.asarray(1e-45 if dtype == np.float32 else 5e-324, dtype) * (i + 1)
        flat[60:70] = np.finfo(np.float32).max / 4 * (-1) ** i
        lists.append([flat[:1000].reshape(50, 20), flat[1000:]])
    lists[3 % n][0][0, :5] = -lists[2 % n][0][0, :5]  # the partial sums of these cancel to zero
    return lists


def _sums_by_the_book(lists: list[list[np.ndarray]], weights: list[float]) -> list[np.ndarray]:
    """A weighted mean's sums as its definition reads: float64 terms summed in order from 0."""
    sums: list[Any] = [0.0] * len(lists[0])
    for arrays, weight in zip(lists, weights, strict=True):
        sums = [s + np.multiply(a, weight, dtype=np.float64) for s, a in zip(sums, arrays, strict=True)]
    return sums


@pytest.mark.parametrize(
    "weights",
    [[64] * 5, [0.5] * 5, [64, 64, 64, 32, 64], [64, 64, 0, 64, 64], [128, 128, 128, 128, 100], [6] * 5],
    ids=["power-of-two", "a-half", "one-differs", "one-empty", "last-differs", "not-a-power"],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_running_mean_of_equal_powers_of_two_is_the_mean_by_the_book_bit_for_bit(
    weights: list[float], dtype: type
) -> None:
    from edgelab.common.wire import Flat, pack
    from edgelab.sync.aggregate import RunningMean

    # Prepare: negative zeros everywhere, subnormals, values near float32's largest, cancellations
    lists = _hard_lists(dtype)

    # Execute: in order, flat lists, the empty one skipped
    running = RunningMean(5)
    for i, (arrays, weight) in enumerate(zip(lists, weights, strict=True)):
        if weight:
            running.add(i, Flat(*pack(arrays)), weight)
        else:
            running.skip(i)

    # Assert: the float64 sums kept (times the weight they are kept divided by), then the mean, to the bit
    kept = [i for i, w in enumerate(weights) if w]
    sums = _sums_by_the_book([lists[i] for i in kept], [weights[i] for i in kept])
    mean = running.result()
    held = [flat * (running._scale or 1.0) for flat in running._acc]  # type: ignore[union-attr]
    assert [h.tobytes() for h in held] == [np.concatenate([s.ravel() for s in sums]).tobytes()]
    for got, ref in zip(mean, sums, strict=True):
        want = (ref / sum(weights)).astype(dtype)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize(
    "weights",
    [[64] * 5, [0.5] * 5, [64, 64, 64, 64, 32], [64, 64, 64, 64, 0], [6] * 5, [64], [64, 64], [64, 32], [32, 6]],
    ids=["power-of-two", "a-half", "last-differs", "last-empty", "not-a-power", "one", "two", "two-differ", "two-odd"],
)
@pytest.mark.parametrize("scale", [1.0, 0.5, 0.1])
@pytest.mark.parametrize("fused", [True, False], ids=["one-pass", "numpy"])
def test_the_step_from_a_running_mean_is_the_mean_applied_bit_for_bit(
    weights: list[float], scale: float, fused: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from edgelab.common.wire import Flat, pack
    from edgelab.sync import fused as one_pass
    from edgelab.sync.aggregate import RunningMean

    # Prepare: hard deltas, weights with the same hard values; numba taken away for the numpy case
    if fused:
        one_pass.warm()
    else:
        monkeypatch.setattr(one_pass, "available", lambda: False)
    lists = _hard_lists(np.float32, len(weights))
    model = Flat(*pack([a[::-1].copy() for a in _hard_lists(np.float32, 1)[0]]))
    model.flats[0][:50] = -0.0  # where every delta is -0.0: a mean of -0.0 would keep the sign the sum must lose
    by_book, running = RunningMean(len(weights)), RunningMean(len(weights))
    for i, (arrays, weight) in enumerate(zip(lists, weights, strict=True)):
        for r in (by_book, running):
            if weight:
                r.add(i, Flat(*pack(arrays)), weight)
            else:
                r.skip(i)
    if fused:  # one pass, but where sums kept scaled by 64 meet a list of 32 among the last two
        assert (running._one_pass(model) is not None) == (weights != [64, 64, 64, 64, 32])

    # Execute
    stepped = running.added_to(model, scale=scale)

    # Assert: the mean applied by the numpy passes, to the bit, as flat as it came
    want = apply_delta(model, by_book.result(), scale=scale)
    assert isinstance(stepped, Flat) and stepped.layout == model.layout
    for got, ref in zip(stepped.flats, want.flats, strict=True):
        assert got.dtype == ref.dtype
        np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))
    np.testing.assert_array_equal(running.result().flats[0].view(np.uint32), by_book.result().flats[0].view(np.uint32))


def test_the_step_from_a_running_mean_of_other_forms_takes_the_numpy_passes() -> None:
    from edgelab.common.wire import Flat, pack
    from edgelab.sync.aggregate import RunningMean

    # Prepare: float64 deltas, and float32 lists the weights are not flat alike with
    cases = []
    for dtype, flat_model in ((np.float64, True), (np.float32, False)):
        lists = _hard_lists(dtype, 3)
        model = [a * 0.5 for a in lists[0]]
        cases.append((lists, Flat(*pack(model)) if flat_model else model))

    for lists, model in cases:
        running, by_book = RunningMean(3), RunningMean(3)
        for i, arrays in enumerate(lists):
            running.add(i, Flat(*pack(arrays)), 64)
            by_book.add(i, Flat(*pack(arrays)), 64)

        # Execute, Assert: not in one pass, yet the same bits as the mean applied
        assert running._one_pass(model) is None
        stepped = running.added_to(model, scale=0.5)
        for got, ref in zip(stepped, apply_delta(model, by_book.result(), scale=0.5), strict=True):
            np.testing.assert_array_equal(got.view(np.uint8), ref.view(np.uint8))


def test_the_one_pass_round_end_names_arrays_it_cannot_take() -> None:
    from edgelab.sync import fused

    acc, part, weights = np.zeros(4), np.zeros(4, np.float32), np.zeros(4, np.float32)
    with pytest.raises(ValueError, match=r"parts\[1\] must be a 1-D float32 array of 4 elements"):
        fused.fold_mean_step(acc, [part, part.astype(np.float64)], [1.0, 1.0], 2.0, weights, 1.0)
    with pytest.raises(ValueError, match="acc must be a 1-D float64 array of 4 elements"):
        fused.fold_mean_step(acc[:3], [part], [1.0], 2.0, weights, 1.0)
    with pytest.raises(ValueError, match="parts must be one or two arrays with a weight each: 3, 3 weights"):
        fused.fold_mean_step(None, [part] * 3, [1.0] * 3, 2.0, weights, 1.0)


def test_a_running_mean_of_flat_lists_stays_flat() -> None:
    from edgelab.common.wire import Flat, pack
    from edgelab.sync.aggregate import RunningMean

    rng = np.random.default_rng(3)
    running = RunningMean(2)
    running.add(1, Flat(*pack(_client(rng))), 3)
    running.add(0, Flat(*pack(_client(rng))), 1)
    assert isinstance(running.result(), Flat)


def test_a_running_mean_names_what_it_was_not_given() -> None:
    from edgelab.sync.aggregate import RunningMean

    rng = np.random.default_rng(4)
    running = RunningMean(3)
    running.add(2, _client(rng), 1)
    with pytest.raises(ValueError, match=r"index=2 is not one still expected of 0..2"):
        running.add(2, _client(rng), 1)
    with pytest.raises(ValueError, match=r"index=3"):
        running.add(3, _client(rng), 1)
    with pytest.raises(ValueError, match=r"lists \[0, 1\] never came"):
        running.result()
    running.skip(0)
    running.skip(1)
    with pytest.raises(ValueError, match="the lists of arrays do not have the same layers"):
        other = RunningMean(2)
        other.add(0, _client(rng), 1)
        other.add(1, _client(rng)[:2], 1)


def test_a_running_mean_sums_in_the_buffers_of_the_last_and_the_last_then_refuses_to_go_on() -> None:
    from edgelab.common.wire import Flat, pack
    from edgelab.sync.aggregate import RunningMean

    # Prepare: three rounds of two flat deltas (a negative zero first, as sum() must turn it to 0.0)
    rng = np.random.default_rng(7)
    rounds = [[Flat(*pack(_client(rng))) for _ in range(2)] for _ in range(3)]
    rounds[1][0].flats[0][0] = np.float32(-0.0)
    rounds[1][1].flats[0][0] = np.float32(-0.0)

    # Execute: each round's running mean recycling the last one's sums
    last, means, buffers = None, [], []
    for deltas in rounds:
        running = RunningMean(2, recycle=last)
        running.add(1, deltas[1], 5)
        running.add(0, deltas[0], 3)
        means.append(running.result())
        buffers.append([id(a) for a in running._acc])
        last = running

    # Assert: the bits of fresh sums, in the same memory each round; the one recycled takes and gives no more
    for deltas, mean in zip(rounds, means, strict=True):
        want = weighted_mean([list(d) for d in deltas], [3, 5])
        for got, ref in zip(mean, want, strict=True):
            np.testing.assert_array_equal(got.view(np.int32), ref.view(np.int32))
    assert np.signbit(means[1].flats[0][0]) == np.False_
    assert buffers[0] == buffers[1] == buffers[2]
    spent = RunningMean(2)
    spent.add(0, rounds[0][0], 1)
    RunningMean(2, recycle=spent)
    with pytest.raises(ValueError, match="gave its sums to the next one"):
        spent.add(1, rounds[0][1], 1)
    with pytest.raises(ValueError, match="gave its sums to the next one"):
        spent.result()


def test_the_server_gives_the_same_weights_from_a_running_mean_as_from_the_updates() -> None:
    # Prepare: two servers with momentum, three rounds of three devices (one round with an empty update)
    rng = np.random.default_rng(6)
    whole, streamed = ParameterServerSync(momentum=0.9), ParameterServerSync(momentum=0.9)
    w_whole = w_streamed = _client(rng)
    for rnd in range(3):
        updates = [DeviceUpdate(f"d{i}", _client(rng), 0 if (rnd, i) == (1, 2) else 64 - i) for i in range(3)]

        # Execute: whole rounds, and the same deltas summed in as they "arrive" (last first)
        w_whole = whole.aggregate(w_whole, updates)
        running = streamed.running_mean(3)
        assert running is not None
        for i in (2, 0, 1):
            if updates[i].samples:
                running.add(i, updates[i].delta, updates[i].samples)
            else:
                running.skip(i)
        w_streamed = streamed.aggregate_running(w_streamed, running)

        # Assert: the same weights, to the bit, every round
        for got, ref in zip(w_streamed, w_whole, strict=True):
            np.testing.assert_array_equal(got.view(np.int32), ref.view(np.int32))


def test_a_strategy_that_changes_the_maths_takes_whole_rounds() -> None:
    class Clipped(ParameterServerSync):
        def server_step(self, updates: list[DeviceUpdate]) -> list[np.ndarray] | None:
            step = super().server_step(updates)
            return None if step is None else [np.clip(s, -1, 1) for s in step]

    patched = ParameterServerSync()
    patched.aggregate = lambda weights, updates: weights  # type: ignore[method-assign]

    assert ParameterServerSync().running_mean(2) is not None
    assert Clipped().running_mean(2) is None
    assert patched.running_mean(2) is None
