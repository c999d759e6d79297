"""torchtpu as a Python package: a wheel built with `python -m build` installs into a fresh
virtual environment, where `import torch` alone loads it and the entry points work."""

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(cmd, env=None, timeout=900):
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    assert done.returncode == 0, f"{cmd}\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done.stdout


def test_wheel_installs_into_a_fresh_venv_and_runs(tmp_path):
    # build-wheel/ sits as deep in the checkout as build/, so ccache (keyed on paths relative to
    # the checkout, CMakeLists.txt) gives the wheel the objects the editable build compiled.
    run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path / "dist"),
         "-C", f"build-dir={ROOT / 'build-wheel'}", "-C", "cmake.define.TORCHTPU_BUILD_TESTS=OFF",
         str(ROOT)])
    wheel, = (tmp_path / "dist").glob("torchtpu-0.1.0-*.whl")

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    # PyTorch (several GB) comes from this environment instead of a download: a path entry, which
    # does not process that folder's .pth files, so the editable torchtpu there stays invisible.
    fresh_site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip()
    Path(fresh_site, "shared_torch.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)])

    check = (
        "import sys, torch\n"
        "import torchtpu\n"  # already imported by `import torch` (asserted next)
        "assert torchtpu.__file__.startswith(sys.argv[1]), torchtpu.__file__\n"
        "x = torch.arange(6.0, device='tpu').reshape(2, 3)\n"
        "assert (x * 2).sum().item() == 30.0\n"
        "f = torch.compile(lambda a: a.sin() + 1, backend='tpu')\n"
        "assert torch.allclose(f(x).cpu(), x.cpu().sin() + 1)\n"
        "print(torchtpu.platform())\n"
    )
    autoloaded = "import sys, torch; assert 'torchtpu' in sys.modules; print(torch.device('tpu'))"
    env = {"TORCHTPU_CACHE_DIR": str(tmp_path / "cache")}
    assert run([str(python), "-c", autoloaded], env=env).strip() == "tpu"
    assert run([str(python), "-c", check, fresh_site], env=env).strip() == "cpu"
    usage = run([str(venv / "bin" / "torchtpu-train"), "--help"], env=env)
    assert "CONFIG" in usage.upper()
