import os, subprocess, sys, time, shutil
def busy():
    f = open("/proc/stat").readline().split()[1:]
    v = list(map(int, f)); idle = v[3] + v[4]
    return (sum(v) - idle) / os.sysconf("SC_CLK_TCK")
space = "/tmp/tiny/space.yaml"
roots = {"old": "/tmp/ab_old", "new": "/work/main"}
# a cache folder holding only the kept empty MLflow store: the untouched model is scored every time
shutil.rmtree("/tmp/abw/cache0", ignore_errors=True)
os.makedirs("/tmp/abw/cache0")
rows = []
for i in range(int(sys.argv[1])):
    for name in ("old", "new") if i % 2 == 0 else ("new", "old"):
        state = f"/tmp/abw/st-{name}-{i}"; shutil.rmtree(state, ignore_errors=True)
        cache = f"/tmp/abw/cache-{name}-{i}"; shutil.rmtree(cache, ignore_errors=True)
        shutil.copytree("/tmp/abw/cache0", cache)
        env = {**os.environ, "PYTHONPATH": roots[name], "RAYCSE_CACHE_DIR": cache}
        b0, t0 = busy(), time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "raycse", "search", "--space", space, "--state", state],
                             env=env, capture_output=True, text=True, cwd="/tmp/abw")
        t, b = time.perf_counter() - t0, busy() - b0
        ok = out.returncode == 0 and "scoring the untouched model" in out.stdout
        print(name, i, f"{b:.1f} CPU-s", f"{t:.1f} s", "ok" if ok else out.stdout[-500:] + out.stderr[-1500:], flush=True)
        if i == 0 and name == "old":  # keep the store template the first run wrote, for the next runs
            shutil.rmtree("/tmp/abw/cache0"); shutil.copytree(cache, "/tmp/abw/cache0")
            shutil.rmtree("/tmp/abw/cache0/untouched", ignore_errors=True)
