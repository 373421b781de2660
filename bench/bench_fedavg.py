"""Benchmark: federated training, vmapped against the same work done one piece at a time.

    python bench/bench_fedavg.py            # both models (a few minutes on a 2-core CPU)
    python bench/bench_fedavg.py --quick    # fewer rounds and repeats, for a smoke run
    python bench/bench_fedavg.py --accelerator   # larger grids, on a GPU or TPU
    python bench/bench_fedavg.py --signals       # only what each learner signal costs
    python bench/bench_fedavg.py --benchmarks    # only the papers' benchmark shapes (minutes)
    python bench/bench_fedavg.py --benchmarks --accelerator   # the same at their sizes

Prints, for the same machine and the same run, for multinomial logistic regression and the
RBCS-F Fashion-MNIST CNN (on scikit-learn's 8×8 digits, so that the CNN fits a CPU run):
  1. one FedAvg round of 8 selected clients (local SGD, E = 1, batch 10, then the weighted
     average): local training vmapped over the clients in one jitted call, against a Python loop
     calling the same jitted single-client ``local_sgd`` once per client;
  2. a 64-configuration grid (RBCS-F selecting 8 of 40 clients on the ``rbcsf`` environment,
     FedAvg on the selected clients, one seed per configuration, each configuration with its own
     learning rate) as one vmapped program, against the 64 configurations run one after another
     through the same program compiled for a single configuration;
  3. what each learner signal costs a round (ms, and × the round's training step): the full
     pass of ``local_loss``, ``minibatch_loss``, every client's ``grad_sketch`` and
     ``local_update_norm``, and the round signals (``update_sketch``, ``update_norm``,
     ``grad_var``) the step computes beside the training;
  4. with --accelerator (instead of 1 to 3): ``sweeps/fl_rbcsf.py`` on its defaults as a
     process, and the vmapped grid at 64, 512 (and, logistic, 4,096) configurations in
     config-rounds per second;
  5. with --benchmarks (instead of the others), the papers' benchmark shapes on synthetic uint8
     data (the training step scales the pixels, ``jfl.fl.train.pixels``):
     a. FEMNIST: W writers (3,597, and 200 as the CPU preset) of lognormal sizes with
        FEMNIST's mean and LEAF's spread, one client per writer (the ``natural`` partition):
        the device bytes of ``federated_data``'s padded client arrays in uint8 against float32,
        the padding overhead (padded / real samples), and one FedAvg round of 10 writers with
        LEAF's CNN (E = 1, batch 10, vmapped) — at W = 200 only on a CPU (3,597 is only
        sized), at both with --accelerator;
     b. FLGo's ResNet-18-GN on CIFAR-10 shapes (32×32×3): one FedAvg round of m clients, each
        ``local_steps`` SGD steps of batch 32, vmapped (m = 4 and 2 steps on a CPU, m = 25 and
        16 steps, about one epoch of a client's 500 samples, with --accelerator), in seconds a
        round and per client-step, with the compile time and the parameter count.
     --quick shrinks both (40 writers, 2 of them trained, 200 sized; 2 ResNet clients, 1 step
     of batch 8).
Timings are the best of several calls after a first (compiling) call. No number here is asserted
anywhere; docs/benchmarks.md records a table from this script.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_rbcsf import bench_parser, best_time, machine

from jfl.envs import RbcsfEnv
from jfl.fl import federated_data, load_dataset, make_learner, make_model, make_partition
from jfl.fl.data import Dataset
from jfl.fl.local import local_sgd
from jfl.fl.models import num_parameters
from jfl.fl.train import pixels, weighted_average
from jfl.policies import get
from jfl.runner import make_batched_run, make_run, seed_keys

NUM_CLIENTS, SELECTED, EPOCHS, BATCH = 40, 8, 1, 10
MODELS = ("logistic", "fashion_cnn")
# Rounds of the grid section per model: the CNN's grid is ~1000× the work of the logistic one.
GRID_ROUNDS = {"logistic": 10, "fashion_cnn": 2}


def setup(model_name: str):
    dataset = load_dataset("digits")
    partition = make_partition("iid", dataset.y_train, NUM_CLIENTS, seed=0)
    data = federated_data(dataset, [partition])
    # 8×8 digits are too small for the CNN's "valid" default (it needs 16×16): pad the maps.
    model = make_model(model_name, dataset.num_classes, padding="same")
    return model, data, tuple(dataset.x_train.shape[1:])


def round_times(model_name: str, repeats: int) -> tuple[float, float]:
    """(vmapped seconds, Python-loop seconds) for one FedAvg round of SELECTED clients."""
    model, data, sample_shape = setup(model_name)
    params = model.init(jax.random.key(0), jnp.zeros((1, *sample_shape)))["params"]
    clients = jnp.arange(SELECTED)
    keys = jax.random.split(jax.random.key(1), SELECTED)
    weights = data.count[0, clients].astype(jnp.float32)

    def apply_fn(p, x):
        return model.apply({"params": p}, x)

    def one_client(params, client, key, data):
        return local_sgd(apply_fn, params, data, client, key, 0.1, epochs=EPOCHS, batch_size=BATCH)

    @jax.jit
    def vmapped(params, data):
        trained = jax.vmap(one_client, in_axes=(None, 0, 0, None))(params, clients, keys, data)
        return weighted_average(trained, weights, params)

    single = jax.jit(one_client)
    average = jax.jit(lambda trained: weighted_average(trained, weights, params))

    def looped():
        trained = [single(params, clients[i], keys[i], data) for i in range(SELECTED)]
        return average(jax.tree.map(lambda *leaves: jnp.stack(leaves), *trained))

    jax.block_until_ready(vmapped(params, data))
    jax.block_until_ready(looped())
    return best_time(lambda: vmapped(params, data), repeats), best_time(looped, repeats)


def grid_times(model_name: str, num_configs: int, rounds: int, repeats: int):
    """(vmapped seconds, sequential seconds, compile seconds) for a grid of configurations."""
    model, data, sample_shape = setup(model_name)
    env = RbcsfEnv()
    spec = get("rbcsf")
    learner = make_learner(
        model, sample_shape, NUM_CLIENTS, epochs=EPOCHS, batch_size=BATCH, slots=SELECTED
    )
    run = make_run(
        env,
        env.default_params(num_clients=NUM_CLIENTS),
        spec.build(NUM_CLIENTS, SELECTED),
        rounds,
        learner=learner,
    )
    batched = make_batched_run(run, data)
    keys = seed_keys(0, [0])
    # Every configuration differs (its own learning rate), so vmap cannot share any work.
    hparams = {k: np.full(num_configs, v, np.float32) for k, v in spec.defaults().items()}
    hparams["learning_rate"] = np.linspace(0.05, 0.5, num_configs, dtype=np.float32)

    def grid():
        return batched(keys, hparams)

    def one_after_another():
        outputs = []
        for c in range(num_configs):
            row = {k: v[c : c + 1] for k, v in hparams.items()}
            outputs.append(batched(keys, row))
        return outputs

    start = time.perf_counter()
    jax.block_until_ready(grid())
    compile_s = time.perf_counter() - start
    jax.block_until_ready(one_after_another())
    return best_time(grid, repeats), best_time(one_after_another, repeats), compile_s


def grid_rate(model_name: str, num_configs: int, rounds: int) -> tuple[float, float]:
    """(config-rounds/s, compile seconds) of the vmapped grid alone, best of two calls."""
    model, data, sample_shape = setup(model_name)
    env = RbcsfEnv()
    spec = get("rbcsf")
    learner = make_learner(
        model, sample_shape, NUM_CLIENTS, epochs=EPOCHS, batch_size=BATCH, slots=SELECTED
    )
    params = env.default_params(num_clients=NUM_CLIENTS)
    run = make_run(env, params, spec.build(NUM_CLIENTS, SELECTED), rounds, learner=learner)
    batched = make_batched_run(run, data)
    keys = seed_keys(0, [0])
    hparams = {k: np.full(num_configs, v, np.float32) for k, v in spec.defaults().items()}
    hparams["learning_rate"] = np.linspace(0.05, 0.5, num_configs, dtype=np.float32)
    start = time.perf_counter()
    jax.block_until_ready(batched(keys, hparams))
    compile_s = time.perf_counter() - start
    seconds = best_time(lambda: batched(keys, hparams), 2)
    return num_configs * rounds / seconds, compile_s


SIGNALS = ("local_loss", "minibatch_loss", "grad_sketch", "local_update_norm")
ROUND_SIGNALS = ("update_sketch", "update_norm", "grad_var")


def signal_costs(model_name: str, repeats: int) -> tuple[float, dict[str, float]]:
    """(seconds of one training step of SELECTED clients, {signal: extra seconds}) of one round:
    each signal before the round on its own, the round signals as the step's extra cost."""
    model, data, sample_shape = setup(model_name)
    learner = make_learner(
        model, sample_shape, NUM_CLIENTS, epochs=EPOCHS, batch_size=BATCH, slots=SELECTED
    )
    hparams = {"learning_rate": np.float32(0.1)}
    state = learner.init(jax.random.key(0), data, hparams)
    action = jnp.arange(NUM_CLIENTS) < SELECTED
    key = jax.random.key(1)

    def step_with(names):
        def step(state):
            new, metrics = learner.step(key, state, action, action, 1, data, hparams)
            return new, {name: metrics[name] for name in names}

        return jax.jit(step)

    plain, with_round = step_with(()), step_with(ROUND_SIGNALS)
    jax.block_until_ready((plain(state), with_round(state)))
    base = best_time(lambda: plain(state), repeats)
    costs = {"round signals": best_time(lambda: with_round(state), repeats) - base}
    for name in SIGNALS:
        signal = jax.jit(
            lambda state, name=name: learner.signals(key, state, data, hparams, (name,))
        )
        jax.block_until_ready(signal(state))
        costs[name] = best_time(lambda signal=signal: signal(state), repeats)
    return base, costs


def signals_section(repeats: int) -> None:
    """Section 3: each signal's cost a round, and its ratio to the training step."""
    print(f"\n3. learner signals, ms a round (× the training step of {SELECTED} clients)")
    names = ("round signals", *SIGNALS)
    print(f"{'model':<14}{'step ms':>9}" + "".join(f"{n:>22}" for n in names))
    for name in MODELS:
        base, costs = signal_costs(name, repeats)
        cells = "".join(f"{f'{costs[n] * 1e3:.2f} ({costs[n] / base:.2f}×)':>22}" for n in names)
        print(f"{name:<14}{base * 1e3:>9.2f}{cells}")


def fl_rbcsf_process() -> tuple[float, float]:
    """(process seconds, driver seconds) of ``sweeps/fl_rbcsf.py`` on its defaults."""
    import json
    import subprocess
    import tempfile

    script = Path(__file__).resolve().parents[1] / "sweeps" / "fl_rbcsf.py"
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        argv = [sys.executable, str(script), "--out", out, "--no-plots", "--quiet"]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        metadata = json.loads((Path(out) / "metadata.json").read_text())
    return wall, metadata["wall_seconds"]


def accelerator_section(quick: bool) -> None:
    """Larger vmapped grids (for an accelerator) and the federated main sweep end to end."""
    wall, driver = fl_rbcsf_process()
    print(f"\nsweeps/fl_rbcsf.py on its defaults: process {wall:.1f} s, driver {driver:.1f} s")
    sizes = {"logistic": (64, 512, 4096), "fashion_cnn": (64, 512)}
    print(f"\n3. vmapped grid on {jax.devices()[0].device_kind}: config-rounds per second")
    print(f"{'model':<14}{'configs':>9}{'rounds':>8}{'config-rounds/s':>17}{'compile s':>11}")
    for name in MODELS:
        rounds = 1 if quick else GRID_ROUNDS[name]
        for configs in sizes[name][: 2 if quick else None]:
            rate, compile_s = grid_rate(name, configs, rounds)
            print(f"{name:<14}{configs:>9,}{rounds:>8}{rate:>17,.1f}{compile_s:>11.1f}")


# Section 5: the papers' benchmark shapes. FEMNIST's writer sizes: 817,851 samples over 3,597
# writers (the full FEMNIST that LEAF's scripts read), with the spread of LEAF's Table 1 (3,550
# writers after its filtering: 226.83 samples per writer, standard deviation 88.94).
FEMNIST_SAMPLES, FEMNIST_WRITERS = 817_851, 3_597
FEMNIST_MEAN, FEMNIST_CV = FEMNIST_SAMPLES / FEMNIST_WRITERS, 88.94 / 226.83
FEMNIST_CLIP = (2, 700)  # samples per writer
FEMNIST_SHAPE, FEMNIST_CLASSES = (28, 28, 1), 62
CIFAR_SHAPE, CIFAR_CLASSES = (32, 32, 3), 10
LEAF_LR, RESNET_LR = 4e-3, 3e-3  # LEAF's FEMNIST rate; FedXplore's CIFAR-10 SGD rate
MIB = 2**20


def writer_sizes(num_writers: int, seed: int = 0) -> np.ndarray:
    """i64[W]: samples per writer, lognormal with FEMNIST's mean and LEAF's coefficient of
    variation, rounded and clipped to ``FEMNIST_CLIP``."""
    sigma2 = np.log1p(FEMNIST_CV**2)
    mu = np.log(FEMNIST_MEAN) - sigma2 / 2  # E[lognormal] = exp(mu + sigma²/2)
    sizes = np.random.default_rng(seed).lognormal(mu, np.sqrt(sigma2), num_writers)
    return np.clip(np.rint(sizes), *FEMNIST_CLIP).astype(np.int64)


def random_images(name: str, n: int, shape, classes: int, seed: int, **fields) -> Dataset:
    """A ``Dataset`` of ``n`` random uint8 images of ``shape`` with labels in [0, ``classes``)
    and a test set of 100; ``fields``: its other fields (the writers)."""
    rng = np.random.default_rng(seed)
    return Dataset(
        name=name,
        x_train=rng.integers(0, 256, (n, *shape), dtype=np.uint8),
        y_train=rng.integers(0, classes, n, dtype=np.int32),
        x_test=rng.integers(0, 256, (100, *shape), dtype=np.uint8),
        y_test=rng.integers(0, classes, 100, dtype=np.int32),
        num_classes=classes,
        source="synthetic",
        **fields,
    )


def synthetic_femnist(num_writers: int, seed: int = 0) -> Dataset:
    """FEMNIST's shapes with random content: uint8 28×28×1 images, 62 classes, ragged writers
    (``writer_sizes``) as the groups, and a small test set."""
    sizes = writer_sizes(num_writers, seed)
    groups = np.repeat(np.arange(num_writers, dtype=np.int32), sizes)
    n = int(sizes.sum())
    return random_images(
        "femnist", n, FEMNIST_SHAPE, FEMNIST_CLASSES, seed + 1, groups_train=groups
    )


def synthetic_clients(num_clients: int, samples: int, seed: int = 0):
    """FederatedData of ``num_clients`` clients of ``samples`` random uint8 CIFAR-shaped
    samples each (one partition, no padding)."""
    dataset = random_images("cifar10", num_clients * samples, CIFAR_SHAPE, CIFAR_CLASSES, seed)
    partition = make_partition("iid", dataset.y_train, num_clients, seed=seed)
    return federated_data(dataset, [partition])


def client_bytes(data) -> tuple[int, int]:
    """(bytes, bytes with float32 samples) of the clients' device arrays (x, y, mask, count)."""
    rest = data.y.nbytes + data.mask.nbytes + data.count.nbytes
    return data.x.nbytes + rest, data.x.size * 4 + rest


def fedavg_round(model, data, sample_shape, clients, repeats: int, learning_rate, **options):
    """(compile + first call seconds, best seconds, parameters) of one FedAvg round: ``clients``
    train from the same model with ``local_sgd`` (``options``), vmapped, then the data-size
    weighted average; uint8 samples are scaled in the step (``pixels``)."""
    params = model.init(jax.random.key(0), jnp.zeros((1, *sample_shape)))["params"]
    clients = jnp.asarray(clients)
    keys = jax.random.split(jax.random.key(1), clients.shape[0])
    weights = data.count[0, clients].astype(jnp.float32)

    def apply_fn(p, x):
        return model.apply({"params": p}, pixels(x))

    def one_client(params, client, key, data):
        return local_sgd(apply_fn, params, data, client, key, learning_rate, **options)

    @jax.jit
    def one_round(params, data):
        trained = jax.vmap(one_client, in_axes=(None, 0, 0, None))(params, clients, keys, data)
        return weighted_average(trained, weights, params)

    start = time.perf_counter()
    jax.block_until_ready(one_round(params, data))
    compile_s = time.perf_counter() - start
    seconds = best_time(lambda: one_round(params, data), repeats)
    return compile_s, seconds, num_parameters(params)


def benchmarks_section(quick: bool, accelerator: bool) -> None:
    """Section 5: FEMNIST's and ResNet-18-GN's benchmark shapes (see the module docstring)."""
    repeats = 1 if quick else 3
    # (writers, whether a round is trained at that size)
    if quick:
        writers, selected = ((40, True), (200, accelerator)), 2
    else:
        writers, selected = ((200, True), (FEMNIST_WRITERS, accelerator)), 10
    model = make_model("leaf_cnn", FEMNIST_CLASSES)
    shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, *FEMNIST_SHAPE)))
    print(
        f"\n5a. FEMNIST shapes: writers of lognormal sizes (mean {FEMNIST_MEAN:.1f}, CV "
        f"{FEMNIST_CV:.2f}, clipped to {list(FEMNIST_CLIP)}), uint8 28×28×1, natural partition;"
        f"\n    one FedAvg round of {selected} writers, LEAF's CNN "
        f"({num_parameters(shapes['params']):,} parameters), E=1, batch 10, vmapped"
    )
    print(
        f"{'writers':>8}{'samples':>10}{'S':>5}{'u8 MiB':>9}{'f32 MiB':>9}{'padded/real':>13}"
        f"{'compile s':>11}{'round s':>9}"
    )
    for num_writers, train in writers:
        dataset = synthetic_femnist(num_writers)
        partition = make_partition(
            "natural", dataset.y_train, num_writers, seed=0, groups=dataset.groups_train
        )
        data = federated_data(dataset, [partition])
        real = int(np.sum(partition.count))
        width = int(data.mask.shape[2])
        u8, f32 = client_bytes(data)
        row = (
            f"{num_writers:>8,}{real:>10,}{width:>5}{u8 / MIB:>9.1f}{f32 / MIB:>9.1f}"
            f"{num_writers * width / real:>13.2f}"
        )
        if train:
            clients = np.sort(np.random.default_rng(2).choice(num_writers, selected, replace=False))
            compile_s, seconds, _ = fedavg_round(
                model, data, FEMNIST_SHAPE, clients, repeats, LEAF_LR, epochs=1, batch_size=10
            )
            row += f"{compile_s:>11.1f}{seconds:>9.2f}"
        else:
            row += f"{'—':>11}{'not run':>9}"
        print(row)
        del dataset, partition, data

    if quick:
        num_clients, steps, batch, samples = 2, 1, 8, 16
    elif accelerator:
        num_clients, steps, batch, samples = 25, 16, 32, 500
    else:
        num_clients, steps, batch, samples = 4, 2, 32, 64
    print(
        f"\n5b. ResNet-18-GN, CIFAR-10 shapes (uint8 32×32×3): one FedAvg round of {num_clients} "
        f"clients, {steps} SGD step(s) of batch {batch} each ({samples} samples a client), vmapped"
    )
    print(
        f"{'clients':>8}{'steps':>7}{'batch':>7}{'params':>12}{'compile s':>11}{'round s':>9}"
        f"{'ms/client-step':>16}"
    )
    data = synthetic_clients(num_clients, samples)
    model = make_model("resnet18_gn", CIFAR_CLASSES)
    compile_s, seconds, count = fedavg_round(
        model,
        data,
        CIFAR_SHAPE,
        np.arange(num_clients),
        repeats,
        RESNET_LR,
        epochs=1,
        batch_size=batch,
        steps=steps,
    )
    per_step = seconds / (num_clients * steps) * 1e3
    print(
        f"{num_clients:>8}{steps:>7}{batch:>7}{count:>12,}{compile_s:>11.1f}{seconds:>9.2f}"
        f"{per_step:>16.1f}"
    )


def main(argv=None) -> int:
    parser = bench_parser(__doc__, "fewer rounds and repeats")
    parser.add_argument("--configs", type=int, default=64, help="configurations in the grid")
    parser.add_argument(
        "--accelerator",
        action="store_true",
        help="only the larger grids (4); with --benchmarks, section 5 at the papers' sizes",
    )
    parser.add_argument("--signals", action="store_true", help="only the signals' costs (3)")
    parser.add_argument(
        "--benchmarks",
        action="store_true",
        help="only the papers' benchmark shapes (5: FEMNIST by writer, ResNet-18-GN on CIFAR)",
    )
    args = parser.parse_args(argv)
    print(f"machine: {machine()}")
    if args.benchmarks:
        benchmarks_section(args.quick, args.accelerator)
        return 0
    if args.signals:
        signals_section(2 if args.quick else 5)
        return 0
    if args.accelerator:
        accelerator_section(args.quick)
        return 0
    repeats = 2 if args.quick else 5

    print(
        f"\n1. one FedAvg round, {SELECTED} selected clients, E={EPOCHS}, batch {BATCH} "
        f"(digits, {NUM_CLIENTS} IID clients)"
    )
    print(f"{'model':<14}{'vmapped ms':>12}{'Python loop ms':>16}{'× loop':>9}")
    for name in MODELS:
        fast, slow = round_times(name, repeats)
        print(f"{name:<14}{fast * 1e3:>12.2f}{slow * 1e3:>16.2f}{slow / fast:>9.1f}")

    print(
        f"\n2. {args.configs}-configuration grid, RBCS-F m={SELECTED} of N={NUM_CLIENTS}, "
        "1 seed each"
    )
    print(
        f"{'model':<14}{'rounds':>7}{'vmapped s':>11}{'one by one s':>14}{'× one by one':>14}"
        f"{'compile s':>11}"
    )
    for name in MODELS:
        rounds = 1 if args.quick else GRID_ROUNDS[name]
        grid_repeats = 1 if name == "fashion_cnn" else max(1, repeats // 2)
        fast, slow, compile_s = grid_times(name, args.configs, rounds, grid_repeats)
        ratio = slow / fast
        print(f"{name:<14}{rounds:>7}{fast:>11.2f}{slow:>14.2f}{ratio:>14.1f}{compile_s:>11.1f}")
    signals_section(repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
