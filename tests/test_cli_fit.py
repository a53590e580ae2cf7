"""``scalemodel fit`` with transport data (--transport), network priors (--network), model
paths outside the CSV's folder (--allow-folder) and the run keys its help lists; every
call through scalemodel.cli.main in-process, checked against fit_cluster itself."""

import json
import math
from pathlib import Path
import warnings

import pytest

import scalemodel as sm
from scalemodel.cli import _NETWORK_CHOICES, main
from scalemodel.fit_priors import NETWORKS

H100_LOG = str(Path(__file__).parent / "data" / "nccl_tests_all_reduce_2x8_h100.txt")
NICS = 8  # the log's nodes (DGX H100: 8 x 400 Gbit/s); with 1 it is refused (per-NIC rate)
P = {"source": "test"}


def _fit_cli(capsys, *argv):
    code = main(["fit", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def _quiet_fit(runs, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sm.CalibrationWarning)
        return sm.fit_cluster(runs, **kw)


def _runs_csv(path, truth, model="bert", ns=(16, 64), bw=400e9):
    rows = [f"{model},{n},{bw:g},{sm.scaling_factor(model, n, bw, fusion='ddp', cluster=truth)!r},"
            f"0.002,{model} {n}" for n in ns]
    path.write_text("model,n,bw,scaling_factor,uncertainty,label\n" + "\n".join(rows) + "\n")
    return path


def _log_truth():
    from scalemodel.fit_transport import load_transport
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sm.CalibrationWarning)
        t = load_transport(H100_LOG, line_rate=400e9, nics_per_node=NICS)
    return t, sm.ClusterProfile(alpha=t.cluster.alpha, utilization=t.cluster.utilization,
                                topology=t.cluster.topology, iteration_overhead=4e-3,
                                provenance=P)


def test_transport_log_fixes_the_network_as_the_api_does(tmp_path, capsys):
    t, truth = _log_truth()
    runs = _runs_csv(tmp_path / "runs.csv", truth)
    code, out, err = _fit_cli(capsys, runs, "--transport", H100_LOG, "--out",
                              tmp_path / "c.json", "--json", "--nics-per-node", NICS)
    assert code == 0, err
    data = json.loads(out)
    api = _quiet_fit(str(runs), transport=H100_LOG, fusion="ddp", nics_per_node=NICS)
    assert data["parameters"]["alpha"]["status"] == "transport"
    assert data["parameters"]["alpha"]["value"] == pytest.approx(t.cluster.alpha)
    for k, p in api.parameters.items():
        got = data["parameters"][k]["value"]
        if got is None:  # no ceiling: null, as in the cluster file (not "inf" as text)
            assert k == "ceiling" and math.isinf(p.value)
            continue
        assert got == pytest.approx(p.value, rel=1e-9), k
    saved = sm.load_cluster(tmp_path / "c.json")
    assert "nccl-tests" in saved.fit_settings["transport"]
    assert saved.topology.gpus_per_node == 8  # the log's topology, not a default
    for n in (16, 64):  # the runs are reached (which fixed cost explains them: the fit's)
        assert sm.scaling_factor("bert", n, 400e9, cluster=saved) == pytest.approx(
            sm.scaling_factor("bert", n, 400e9, fusion="ddp", cluster=truth), rel=0.005)


def test_two_logs_and_a_cluster_json_as_transport(tmp_path, capsys):
    t, truth = _log_truth()
    runs = _runs_csv(tmp_path / "runs.csv", truth)
    inside = tmp_path / "inside.txt"
    inside.write_text("\n".join(ln for ln in Path(H100_LOG).read_text().splitlines()
                                if "gpu-node-02" not in ln) + "\n")
    code, out, err = _fit_cli(capsys, runs, "--transport", inside, H100_LOG, "--json",
                              "--nics-per-node", NICS)
    assert code == 0, err
    data = json.loads(out)
    api = _quiet_fit(str(runs), transport=[str(inside), H100_LOG], nics_per_node=NICS)
    assert data["cluster"]["topology"]["intra_bw"] == pytest.approx(
        api.cluster.topology.intra_bw)
    from scalemodel.calibrate.nccl_tests import read_nccl_tests
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sm.CalibrationWarning)
        intra = read_nccl_tests(inside).fit()
    assert data["cluster"]["topology"]["intra_bw"] == pytest.approx(intra.bandwidth)
    # the files before the CSV, ended with --
    code, out2, err = _fit_cli(capsys, "--json", "--nics-per-node", NICS, "--transport", inside,
                               H100_LOG, "--", runs)
    assert code == 0, err
    assert json.loads(out2)["cluster"] == data["cluster"]
    # the same transport as a cluster file (what python -m scalemodel.calibrate writes)
    path = sm.save_cluster(t.cluster, tmp_path / "transport.json")
    code, out, err = _fit_cli(capsys, runs, "--transport", path)
    assert code == 0, err
    assert "transport" in out


def test_network_priors_reach_the_fit(tmp_path, capsys):
    assert set(_NETWORK_CHOICES) == set(NETWORKS)
    runs = tmp_path / "runs.csv"
    runs.write_text("model,n,bw,scaling_factor\nresnet50,16,10Gbps,0.6\n"
                    "resnet50,64,10Gbps,0.55\n")
    fits = {}
    for network in ("nccl-socket", "gloo"):
        code, out, err = _fit_cli(capsys, runs, "--network", network, "--json")
        assert code == 0, err
        fits[network] = json.loads(out)
        api = _quiet_fit(str(runs), network=network)
        assert fits[network]["cluster"] == json.loads(json.dumps(api.to_dict()["cluster"]))
    # the priors differ, and so do the ranked explanations' scores
    assert fits["nccl-socket"]["alternatives"] != fits["gloo"]["alternatives"]
    with pytest.raises(SystemExit) as exc:
        main(["fit", str(runs), "--network", "infiniband"])
    assert exc.value.code == 2
    assert "--network" in capsys.readouterr().err


def test_allow_folder_lets_a_model_path_out(tmp_path, capsys):
    inside, outside = tmp_path / "runs", tmp_path / "profiles"
    inside.mkdir()
    outside.mkdir()
    sm.save_profile(sm.load_profile("resnet50"), outside / "mine.json")
    runs = inside / "runs.csv"
    runs.write_text("model,n,bw,scaling_factor\n../profiles/mine.json,16,10Gbps,0.6\n"
                    "../profiles/mine.json,64,10Gbps,0.55\n")
    code, out, err = _fit_cli(capsys, runs)
    assert code == 2 and "outside" in err and "runs[0].model" in err
    code, out, err = _fit_cli(capsys, runs, "--allow-folder", outside)
    assert code == 0, err
    assert "mine.json" not in err


def test_transport_and_cluster_together_is_one_line_error(tmp_path, capsys):
    t, truth = _log_truth()
    runs = _runs_csv(tmp_path / "runs.csv", truth)
    path = sm.save_cluster(t.cluster, tmp_path / "transport.json")
    code, out, err = _fit_cli(capsys, runs, "--transport", path, "--cluster", path)
    assert code == 2 and err.startswith("scalemodel: error:") and "transport" in err
    code, out, err = _fit_cli(capsys, runs, "--transport", tmp_path / "none.txt")
    assert code == 2 and "none.txt" in err


def test_help_lists_the_run_keys_and_the_new_options(capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for key in ("tokens_per_second_per_gpu", "sharding", "grad_accum", "wrapped",
                "bucket_cap_mb", "--transport", "--network", "--allow-folder",
                "nccl-roce", "straggler_spread"):
        assert key in text, key
    from scalemodel.runs import _RUN_KEYS
    for key in _RUN_KEYS:  # every key a run list may have is named in the help
        assert key in text, key


LLAMA_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
            "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
            "vocab_size": 128256, "max_position_embeddings": 131072,
            "tie_word_embeddings": False}


def test_a_hugging_face_config_calibrates_from_the_csv(tmp_path, capsys):
    """A config.json as the run's model, built with the row's seq, micro_batch and gpu:
    the same fit as the API's on load_hf_profile, and the CLI's prediction with --seq,
    --micro-batch and --gpu finds the fitted efficiency (torchtitan's Llama 3.1 8B with
    FSDP on 8 H100: 5,762 tokens/s per GPU, benchmarks/data/published_llm_scaling.csv)."""
    from scalemodel.hf_configs import load_hf_profile

    cfg = tmp_path / "llama.json"
    cfg.write_text(json.dumps(LLAMA_8B))
    runs = tmp_path / "runs.csv"
    runs.write_text("model,n,bw,tokens_per_second_per_gpu,sharding,seq,micro_batch,gpu\n"
                    "llama.json,8,400Gbps,5762,zero3,8192,2,h100-sxm\n")
    code, out, err = _fit_cli(capsys, runs, "--nics-per-node", NICS, "--out",
                              tmp_path / "c.json")
    assert code == 0, err
    prof = load_hf_profile(cfg, seq=8192, micro_batch=2, gpu="h100-sxm")
    api = _quiet_fit([dict(model=prof, n=8, bw=400e9, tokens_per_second_per_gpu=5762,
                           sharding="zero3")], nics_per_node=NICS)
    saved = sm.load_cluster(tmp_path / "c.json")
    eff = saved.extra["efficiency"]
    assert eff["value"] == pytest.approx(api.cluster.extra["efficiency"]["value"], rel=1e-9)
    assert list(eff["micro_batches"].values()) == [[2]]
    code = main(["iteration", "--model", str(cfg), "--seq", "8192", "--micro-batch", "4",
                 "--gpu", "h100-sxm", "--n", "128", "--bw", "400Gbps", "--sharding",
                 "zero3", "--cluster", str(tmp_path / "c.json"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    it = sm.iteration_time(load_hf_profile(cfg, seq=8192, micro_batch=4, gpu="h100-sxm"),
                           128, 400e9, sharding="zero3", cluster=saved)
    assert out["total"] == pytest.approx(float(it.total), rel=1e-9)


@pytest.mark.parametrize("row, name, text", [
    ("bert,8,100Gbps,0.9,,2,,", "runs[0].micro_batch",
     "applies only when the run's model is a Hugging Face config.json"),
    ("llama.json,8,100Gbps,0.9,0,,,", "runs[0].seq", "must be an integer in [1,"),
    ("llama.json,8,100Gbps,0.9,2048,1.5,,", "runs[0].micro_batch", "must be an integer"),
    ("llama.json,8,100Gbps,0.9,2048,1,h900,", "runs[0].gpu", "h900"),
])
def test_config_columns_are_checked_by_name(tmp_path, capsys, row, name, text):
    (tmp_path / "llama.json").write_text(json.dumps(LLAMA_8B))
    runs = tmp_path / "runs.csv"
    runs.write_text("model,n,bw,scaling_factor,seq,micro_batch,gpu,label\n" + row + "\n")
    code, out, err = _fit_cli(capsys, runs)
    assert code != 0 and name in err and text in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_the_run_table_tells_long_labels_apart_and_warnings_are_prefixed(tmp_path, capsys):
    # the wrapper step's labels differ at their ends only: cut to 23 characters every
    # row read 'DDP on one worker, buck'; the fit's warnings lacked 'scalemodel: '
    t1 = sm.load_profile("resnet50").iteration_time
    lines = ["model,n,bw,iteration_time,single_worker_time,wrapped,bucket_cap_mb,"
             "uncertainty,fusion,label"]
    for k, cap in enumerate((1, 5, 25, 100)):
        t = t1 * (0.995 if k == 0 else 1 + 0.004 * k)  # the first: noise, warned
        lines.append(f"resnet50,1,100e9,{t!r},{t1!r},True,{cap},0.01,ddp,"
                     f'"DDP on one worker, bucket_cap_mb {cap}"')
    (tmp_path / "runs.csv").write_text("\n".join(lines) + "\n")
    code, out, err = _fit_cli(capsys, tmp_path / "runs.csv")
    assert code == 0, err
    for cap in (1, 5, 25, 100):
        assert f"DDP on one worker, bucket_cap_mb {cap} " in out
    said = [line for line in err.splitlines() if "warning" in line]
    assert said and all(line.startswith("scalemodel: warning: ") for line in said)


@pytest.mark.parametrize("hosts", [True, False])
def test_transport_logs_refuse_gpus_per_node_they_did_not_run_with(tmp_path, hosts):
    # the API's transport= path checks what from-nccl-tests checks: a log without host
    # names and GPUs per node that do not divide its ranks was fitted (a 3-GPU topology)
    log = Path(H100_LOG)
    if not hosts:
        log = tmp_path / "nohosts.txt"
        log.write_text(Path(H100_LOG).read_text().replace(" on gpu-node-0", " x"))
        assert " on " not in "".join(line for line in log.read_text().splitlines()
                                     if "Rank" in line)
    runs = [dict(model="resnet50", n=16, bw=400e9, scaling_factor=0.9)]
    with pytest.raises(sm.InvalidParameterError,
                       match="8 GPUs per node" if hosts else "does not divide the 16"):
        sm.fit_cluster(runs, transport=str(log), gpus_per_node=3, nics_per_node=NICS)
