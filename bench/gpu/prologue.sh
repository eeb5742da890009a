# Sourced by the device-call scripts (bench/gpu/s37-*.sh on): run from the repository root with
# the packed binaries' libraries, the output also into $OUT/run.log, and a deadline DL (seconds,
# default $1) that el prints against and left N checks (N seconds to spare).
cd "$(dirname "${BASH_SOURCE[1]}")/.." || exit 1
export LD_LIBRARY_PATH=$PWD/.gpu/lib E0_ASSETS=$PWD/assets
T0=$(date +%s)
exec > >(tee "${OUT:-/tmp}/run.log") 2>&1
DL=${DL:-${1:-540}}
el() { echo "($(( $(date +%s) - T0 )) s)"; }
left() { [ $(( $(date +%s) - T0 )) -lt $((DL - $1)) ]; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
