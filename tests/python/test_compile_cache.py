"""The persistent compile cache across processes: shared directories, concurrent writers, damaged
entries, unwritable, full and vanishing directories, private and authenticated entries, and the
size bound. Each case runs fresh Python processes."""

import json
import os
import resource
import stat
import subprocess
import sys
import textwrap

import torch

WORKLOAD = textwrap.dedent("""
    import json, sys, torch, torchtpu
    torch.manual_seed(0)
    x = torch.randn(16, 16)
    w = torch.randn(16, 16)
    y = ((x.to("tpu") @ w.to("tpu")).relu() * 0.5).sum(0)
    out = {"y": y.cpu().tolist(), "cache": torchtpu.cache.stats()}
    out["cache"].pop("compiles")
    print(json.dumps(out))
""")


def run(env_extra, check=True, workload=WORKLOAD, preexec_fn=None):
    env = dict(os.environ, **env_extra)
    env.setdefault("TORCHTPU_SHARED_CACHE_DIR", "")
    p = subprocess.run([sys.executable, "-W", "always", "-c", workload], env=env, capture_output=True, text=True,
                       preexec_fn=preexec_fn)
    if check:
        assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


def entries(d):
    return [os.path.join(d, f) for f in os.listdir(d) if f.endswith(".xlaexe")]


def expected():
    torch.manual_seed(0)
    x, w = torch.randn(16, 16), torch.randn(16, 16)
    return ((x @ w).relu() * 0.5).sum(0)


def test_a_second_process_loads_every_program_from_disk(tmp_path):
    cold, _ = run({"TORCHTPU_CACHE_DIR": str(tmp_path)})
    warm, _ = run({"TORCHTPU_CACHE_DIR": str(tmp_path)})
    assert cold["cache"]["misses"] > 0 and cold["cache"]["hits"]["disk"] == 0
    assert warm["cache"]["misses"] == 0 and warm["cache"]["hits"]["disk"] == cold["cache"]["misses"]
    torch.testing.assert_close(torch.tensor(warm["y"]), expected())


def test_ranks_sharing_the_cores_compile_programs_of_their_own(tmp_path):
    """torchrun ranks with fewer than two cores each (LOCAL_WORLD_SIZE) run matrix products on the
    calling thread, an option their programs are compiled with: one process's cached programs are
    not theirs, and the results are the same."""
    one, _ = run({"TORCHTPU_CACHE_DIR": str(tmp_path), "LOCAL_WORLD_SIZE": "1"})
    ranks = str(max(2, os.cpu_count() or 1))
    shared, _ = run({"TORCHTPU_CACHE_DIR": str(tmp_path), "LOCAL_WORLD_SIZE": ranks})
    assert one["cache"]["misses"] > 0 and shared["cache"]["misses"] == one["cache"]["misses"], (one, shared)
    again, _ = run({"TORCHTPU_CACHE_DIR": str(tmp_path), "LOCAL_WORLD_SIZE": "1"})
    assert again["cache"]["misses"] == 0
    torch.testing.assert_close(torch.tensor(shared["y"]), expected())


def test_two_processes_writing_one_directory_at_once(tmp_path):
    env = dict(os.environ, TORCHTPU_CACHE_DIR=str(tmp_path), TORCHTPU_SHARED_CACHE_DIR="")
    procs = [subprocess.Popen([sys.executable, "-c", WORKLOAD], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    for out in outs:
        torch.testing.assert_close(torch.tensor(out["y"]), expected())
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tmp")]  # no stray temporaries
    third, stderr = run({"TORCHTPU_CACHE_DIR": str(tmp_path)})
    assert third["cache"]["misses"] == 0 and "damaged" not in stderr


def damage_and_rerun(tmp_path, damage):
    cold, _ = run({"TORCHTPU_CACHE_DIR": str(tmp_path)})
    for path in entries(tmp_path):
        damage(path)
    again, stderr = run({"TORCHTPU_CACHE_DIR": str(tmp_path)})
    torch.testing.assert_close(torch.tensor(again["y"]), expected())
    assert again["cache"]["misses"] == cold["cache"]["misses"]  # every damaged entry recompiled
    return stderr


def test_a_corrupt_entry_is_dropped_and_recompiled_with_a_warning(tmp_path):
    def flip_a_byte(path):
        with open(path, "r+b") as f:
            f.seek(-100, os.SEEK_END)
            b = f.read(1)
            f.seek(-100, os.SEEK_END)
            f.write(bytes([b[0] ^ 0xFF]))

    stderr = damage_and_rerun(tmp_path, flip_a_byte)
    assert "damaged (checksum mismatch)" in stderr


def test_a_truncated_entry_is_dropped_and_recompiled_with_a_warning(tmp_path):
    stderr = damage_and_rerun(tmp_path, lambda path: os.truncate(path, os.path.getsize(path) // 2))
    assert "damaged (truncated" in stderr


def test_an_unwritable_directory_warns_and_still_computes(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")  # nothing can be created below a file, not even by root
    out, stderr = run({"TORCHTPU_CACHE_DIR": str(blocker / "cache")})
    torch.testing.assert_close(torch.tensor(out["y"]), expected())
    assert "not writable" in stderr


def test_a_read_only_directory_is_still_read(tmp_path):
    run({"TORCHTPU_CACHE_DIR": str(tmp_path)})
    os.chmod(tmp_path, 0o555)
    try:
        warm, _ = run({"TORCHTPU_CACHE_DIR": str(tmp_path)})
    finally:
        os.chmod(tmp_path, 0o755)
    assert warm["cache"]["misses"] == 0


def test_the_shared_directory_serves_another_host(tmp_path):
    shared = tmp_path / "shared"
    first, _ = run({"TORCHTPU_CACHE_DIR": str(tmp_path / "host_a"), "TORCHTPU_SHARED_CACHE_DIR": str(shared)})
    second, _ = run({"TORCHTPU_CACHE_DIR": str(tmp_path / "host_b"), "TORCHTPU_SHARED_CACHE_DIR": str(shared)})
    assert second["cache"]["misses"] == 0
    assert second["cache"]["hits"]["shared"] == first["cache"]["misses"]
    assert len(entries(tmp_path / "host_b")) == first["cache"]["misses"]  # copied to the local tier


CLEAR = textwrap.dedent("""
    import json, os, torch, torchtpu
    x = torch.ones(5, device="tpu")
    (x * 7).cpu()
    before = torchtpu.cache.stats()["misses"]
    torchtpu.cache.clear()
    left = [f for f in os.listdir(os.environ["TORCHTPU_CACHE_DIR"]) if f.endswith(".xlaexe")]
    (x * 7).cpu()
    print(json.dumps({"before": before, "after": torchtpu.cache.stats()["misses"], "left": left}))
""")


def test_clear_empties_memory_and_the_persistent_directory(tmp_path):
    env = dict(os.environ, TORCHTPU_CACHE_DIR=str(tmp_path), TORCHTPU_SHARED_CACHE_DIR="")
    p = subprocess.run([sys.executable, "-c", CLEAR], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["left"] == []
    assert out["after"] > out["before"]  # the same op compiled again


def test_the_local_directory_is_private_to_the_user(tmp_path):
    cache = tmp_path / "made-by-torchtpu"
    run({"TORCHTPU_CACHE_DIR": str(cache)})
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    assert entries(cache) and all(stat.S_IMODE(os.stat(e).st_mode) == 0o600 for e in entries(cache))


def test_entries_other_users_can_write_are_refused(tmp_path):
    cold, _ = run({"TORCHTPU_CACHE_DIR": str(tmp_path)})
    for path in entries(tmp_path):
        os.chmod(path, 0o666)
    again, stderr = run({"TORCHTPU_CACHE_DIR": str(tmp_path)})
    assert again["cache"]["hits"]["disk"] == 0 and again["cache"]["misses"] == cold["cache"]["misses"]
    assert "other users can write it" in stderr
    torch.testing.assert_close(torch.tensor(again["y"]), expected())
    assert all(stat.S_IMODE(os.stat(e).st_mode) == 0o600 for e in entries(tmp_path))  # replaced by safe ones


def test_a_directory_other_users_can_write_is_not_used(tmp_path):
    os.chmod(tmp_path, 0o777)
    out, stderr = run({"TORCHTPU_CACHE_DIR": str(tmp_path)})
    assert "writable by other users" in stderr and not entries(tmp_path)
    torch.testing.assert_close(torch.tensor(out["y"]), expected())


def test_an_authenticated_shared_directory_loads_only_entries_under_its_key(tmp_path):
    shared = str(tmp_path / "shared")

    def host(name, key):
        return run({"TORCHTPU_CACHE_DIR": str(tmp_path / name), "TORCHTPU_SHARED_CACHE_DIR": shared,
                    "TORCHTPU_CACHE_KEY": key})

    first, _ = host("a", "team secret")
    same_key, _ = host("b", "team secret")
    assert same_key["cache"]["hits"]["shared"] == first["cache"]["misses"] and same_key["cache"]["misses"] == 0
    intruder, stderr = host("c", "a guess")
    assert intruder["cache"]["hits"]["shared"] == 0 and intruder["cache"]["misses"] == first["cache"]["misses"]
    assert "fails authentication" in stderr
    torch.testing.assert_close(torch.tensor(intruder["y"]), expected())


def test_the_directory_is_bounded_and_evicts_the_least_recently_used(tmp_path):
    run({"TORCHTPU_CACHE_DIR": str(tmp_path / "unbounded")})
    sizes = sorted(os.path.getsize(e) for e in entries(tmp_path / "unbounded"))
    bound = sizes[-1] + sizes[-2]  # room for about two entries
    out, _ = run({"TORCHTPU_CACHE_DIR": str(tmp_path / "bounded"), "TORCHTPU_CACHE_MAX_BYTES": str(bound)})
    held = sum(os.path.getsize(e) for e in entries(tmp_path / "bounded"))
    assert 0 < held <= bound and len(sizes) > len(entries(tmp_path / "bounded"))
    torch.testing.assert_close(torch.tensor(out["y"]), expected())


def test_a_full_disk_warns_and_leaves_no_partial_entries(tmp_path):
    def small_file_limit():  # what `ulimit -f 1` does: writes past 1 KiB fail (every entry is larger)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))

    out, stderr = run({"TORCHTPU_CACHE_DIR": str(tmp_path)}, preexec_fn=small_file_limit)
    torch.testing.assert_close(torch.tensor(out["y"]), expected())
    assert "not writable (or full)" in stderr
    assert os.listdir(tmp_path) == []  # no half-written entry, no temporary left behind


VANISHING = textwrap.dedent("""
    import json, os, shutil, torch, torchtpu
    x = torch.ones(8, device="tpu")
    (x * 3).cpu()
    shutil.rmtree(os.environ["TORCHTPU_CACHE_DIR"])
    y = (x - 5).cpu()
    print(json.dumps({"y": y.tolist()}))
""")


def test_a_directory_that_vanishes_mid_run_is_made_again(tmp_path):
    cache = tmp_path / "cache"
    out, stderr = run({"TORCHTPU_CACHE_DIR": str(cache)}, workload=VANISHING)
    assert out["y"] == [-4.0] * 8
    assert entries(cache) and "Warning" not in stderr


# The runtime starts (device_count) a moment before the first op, as building a model does, so
# the prefetching thread is ahead of the ops.
PREFETCHED = WORKLOAD.replace("import json, sys, torch, torchtpu\n",
                              "import json, sys, time, torch, torchtpu\ntorch.tpu.device_count()\ntime.sleep(1)\n")


def test_a_rerun_of_the_same_command_finds_its_programs_loaded(tmp_path):
    env = {"TORCHTPU_CACHE_DIR": str(tmp_path)}
    cold, _ = run(env, workload=PREFETCHED)
    manifests = os.listdir(tmp_path / "workloads")
    assert len(manifests) == 1  # the programs this command used, in first-use order
    warm, _ = run(env, workload=PREFETCHED)
    assert cold["cache"]["prefetched"] == 0 and cold["cache"]["misses"] > 0
    assert warm["cache"]["prefetched"] == warm["cache"]["hits"]["disk"] == cold["cache"]["misses"]
    torch.testing.assert_close(torch.tensor(warm["y"]), expected())
    off, _ = run(dict(env, TORCHTPU_CACHE_PREFETCH="0"), workload=PREFETCHED)
    assert off["cache"]["prefetched"] == 0 and off["cache"]["hits"]["disk"] == cold["cache"]["misses"]
    other, _ = run(env)  # another command: its own manifest, nothing prefetched the first time
    assert other["cache"]["prefetched"] == 0 and len(os.listdir(tmp_path / "workloads")) == 2


def test_a_damaged_manifest_or_missing_entries_only_cost_the_prefetch(tmp_path):
    env = {"TORCHTPU_CACHE_DIR": str(tmp_path)}
    run(env, workload=PREFETCHED)
    (manifest,) = (tmp_path / "workloads").iterdir()
    keys = manifest.read_text().split()
    manifest.write_text("\n".join(["../../../etc/passwd", "0" * 64, *keys]) + "\n\x00garbage")
    for entry in entries(tmp_path)[:1]:
        os.remove(entry)
    out, stderr = run(env, workload=PREFETCHED)
    assert out["cache"]["prefetched"] == len(keys) - 1 and out["cache"]["misses"] == 1
    assert "Warning" not in stderr
    torch.testing.assert_close(torch.tensor(out["y"]), expected())


def test_each_compile_reports_the_memory_its_intermediates_need():
    """``stats()["compiles"]`` gives each recent compile's name, seconds and temporary bytes as XLA
    planned them: a fused window whose matrix product feeds a reduction keeps the product (256 KiB)
    in a temporary buffer."""
    script = textwrap.dedent("""
        import torch, torchtpu
        torchtpu.set_eager_mode("fused")
        x = torch.randn(256, 256, device="tpu")
        print(((x @ x.t()) * 2).sum().item())
        torchtpu.cache.wait_for_background_compiles()  # a fused window's first compile
        for what, seconds, temp_bytes in torchtpu.cache.stats()["compiles"]:
            print("COMPILE", temp_bytes, seconds >= 0, what)
    """)
    p = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, TORCHTPU_CACHE_DIR=""),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    compiles = [line.split(" ", 3) for line in p.stdout.splitlines() if line.startswith("COMPILE")]
    window = [c for c in compiles if "fused window" in c[3]]
    assert window and all(c[2] == "True" for c in compiles), p.stdout
    assert int(window[-1][1]) >= 256 * 256 * 4, p.stdout


TIERS = textwrap.dedent("""
    import json, torch, torchtpu
    torch.manual_seed(0)
    x = torch.randn(8, 24).to("tpu")
    runs = []
    for _ in range(6):
        runs.append(torch.softmax(x * 3, dim=1).cpu())
        torchtpu.cache.wait_for_background_compiles()  # a promotion lands before the next run
    s = torchtpu.cache.stats()
    print(json.dumps({"runs": [r.tolist() for r in runs], "quick": s["quick_compiles"], "misses": s["misses"],
                      "promotions": s["promotions"], "compiles": torchtpu.metrics.counters()["compiles"],
                      "disk": s["hits"]["disk"]}))
""")


def test_a_program_is_compiled_quickly_first_and_optimized_once_it_runs_often_on_enough_bytes(tmp_path):
    # each run of mul and softmax reads and writes 2 x 768 bytes: 3 runs move 4.5 KiB
    # (Programs this small are light and skip the tiers, below: the limit is turned off here.)
    env = {"TORCHTPU_CACHE_DIR": str(tmp_path), "TORCHTPU_PROMOTE_AFTER": "3", "TORCHTPU_PROMOTE_AFTER_BYTES": "4KiB",
           "TORCHTPU_QUICK_COMPILE": "all", "TORCHTPU_LIGHT_PROGRAM_BYTES": "0"}
    cold, _ = run(env, workload=TIERS)
    assert cold["quick"] == cold["misses"] > 0, cold
    # mul and softmax each ran 6 times: both were promoted, which the compile count does not show
    assert cold["promotions"] == 2 and cold["compiles"] == cold["misses"], cold
    expected = torch.softmax(torch.randn(8, 24, generator=torch.manual_seed(0)) * 3, dim=1)
    for r in cold["runs"]:
        torch.testing.assert_close(torch.tensor(r), expected)
    # The next process loads both tiers' programs from disk: the optimized ones for what was promoted
    warm, _ = run(env, workload=TIERS)
    assert warm["misses"] == 0 and warm["promotions"] == 0, warm
    # by default a program must also have moved 64 MiB: these small ones stay quick, as a decode
    # step's do (their optimized compile would not pay back)
    small, _ = run({**env, "TORCHTPU_CACHE_DIR": str(tmp_path / "default"), "TORCHTPU_PROMOTE_AFTER_BYTES": "64MiB"},
                   workload=TIERS)
    assert small["quick"] == small["misses"] > 0 and small["promotions"] == 0, small


def test_a_light_program_is_compiled_quickly_once_and_never_promoted(tmp_path):
    """Light programs (at most TORCHTPU_LIGHT_PROGRAM_BYTES a run) with small results, other than
    element-wise multiply-adds, are compiled with the quick tier's options in every tier: once,
    never again optimized, so their bits never change (this mul and softmax)."""
    env = {"TORCHTPU_CACHE_DIR": str(tmp_path), "TORCHTPU_PROMOTE_AFTER": "3", "TORCHTPU_PROMOTE_AFTER_BYTES": "4KiB",
           "TORCHTPU_QUICK_COMPILE": "all"}
    out, _ = run(env, workload=TIERS)
    assert out["misses"] > 0 and out["quick"] == 0 and out["promotions"] == 0, out
    expected = torch.softmax(torch.randn(8, 24, generator=torch.manual_seed(0)) * 3, dim=1)
    for r in out["runs"]:
        torch.testing.assert_close(torch.tensor(r), expected)


EXACT = textwrap.dedent("""
    import json, torch, torchtpu
    f, i = torch.arange(6.0).to("tpu"), torch.arange(6).to("tpu")
    cat, shifted, scaled = torch.cat([f, f]).cpu(), (i + 1).cpu(), torch.add(f, f, alpha=3).cpu()
    s = torchtpu.cache.stats()
    print(json.dumps({"quick": s["quick_compiles"], "misses": s["misses"], "cat": cat.tolist()}))
""")


def test_by_default_only_programs_whose_bits_cannot_change_compile_quickly(tmp_path):
    """A float product and a sum may become a fused multiply-add when optimized: a quick program
    could differ from its promoted successor in the last bit, so f + 3 * f is not quick."""
    out, _ = run({"TORCHTPU_CACHE_DIR": str(tmp_path), "TORCHTPU_QUICK_COMPILE": "exact", "TORCHTPU_LIGHT_PROGRAM_BYTES": "0"},
                 workload=EXACT)
    assert out["misses"] == 3 and out["quick"] == 2, out  # cat and the integer add; not f + 3 * f
    assert out["cat"] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0] * 2


def test_quick_compiles_can_be_turned_off(tmp_path):
    out, _ = run({"TORCHTPU_CACHE_DIR": str(tmp_path), "TORCHTPU_QUICK_COMPILE": "0", "TORCHTPU_LIGHT_PROGRAM_BYTES": "0"},
                 workload=TIERS)
    assert out["misses"] > 0 and out["quick"] == 0 and out["promotions"] == 0, out
