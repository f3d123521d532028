#!/usr/bin/env bash
# Start the MLflow UI on a tracking store and screenshot, in headless Chromium, the comparison page of an
# experiment's trial runs (the parallel-coordinates plot of tau/m against STS-B dev lives there).
#   usage: scripts/mlflow_ui_check.sh [STORE_URI] [EXPERIMENT] [OUT.png]
#   needs: Debian's chromium (apt-get install chromium)
set -euo pipefail
store=${1:-sqlite:///mlflow.db}
experiment=${2:-raycse-focal}
out=${3:-mlflow_ui.png}
port=${MLFLOW_UI_PORT:-5055}
command -v chromium >/dev/null || { echo "mlflow_ui_check: chromium is not installed (apt-get install chromium)" >&2; exit 2; }

mlflow ui --backend-store-uri "$store" --host 127.0.0.1 --port "$port" >"${TMPDIR:-/tmp}/mlflow_ui_check.log" 2>&1 &
server=$!
profile=$(mktemp -d)
trap 'kill $server 2>/dev/null; rm -rf "$profile"' EXIT
for _ in $(seq 1 60); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  sleep 1
done
curl -sf "http://127.0.0.1:$port/health" >/dev/null || { echo "mlflow_ui_check: the UI did not start" >&2; exit 1; }

# the comparison page of the experiment's trial runs (children of the search's parent run)
url=$(python - "$store" "$experiment" "$port" <<'PY'
import json, sys, urllib.parse
from mlflow.tracking import MlflowClient
store, name, port = sys.argv[1:]
client = MlflowClient(tracking_uri=store)
exp = client.get_experiment_by_name(name)
if exp is None:
    sys.exit(f"mlflow_ui_check: no experiment {name!r} in {store}")
runs = [r.info.run_id for r in client.search_runs([exp.experiment_id]) if "raycse.search" not in r.data.tags]
query = urllib.parse.urlencode({"runs": json.dumps(runs), "experiments": json.dumps([exp.experiment_id])})
print(f"http://127.0.0.1:{port}/#/compare-runs?{query}")
PY
)
echo "screenshot of $url"
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --user-data-dir="$profile" --window-size=1600,1400 \
  --virtual-time-budget=20000 --screenshot="$out" "$url" 2>/dev/null
test -s "$out" && echo "wrote $out"
