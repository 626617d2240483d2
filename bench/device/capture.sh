# Capture a real GPU host for tests/fixtures: nvidia-smi views, the collector dry run, and
# copy/GEMM timings. Run on the GPU machine from the repository root with OUT set to a folder.
export PYTHONUNBUFFERED=1
date -u > $OUT/date.txt
nvidia-smi > $OUT/nvidia-smi.txt 2>&1
nvidia-smi topo -m > $OUT/topo_m.txt 2>&1
nvidia-smi topo -p2p r > $OUT/topo_p2p.txt 2>&1
nvidia-smi -q > $OUT/nvidia-smi-q.txt 2>&1
timeout 120 python3 -m collector --dry-run --hostname h200-device-lease > $OUT/collector_dryrun.json 2> $OUT/collector_stderr.txt; echo "collector rc=$?"
timeout 300 python3 bench/device/measure_copies_gemm.py > $OUT/measure.json 2> $OUT/measure_stderr.txt; echo "measure rc=$?"
ls -la $OUT; head -c 600 $OUT/collector_dryrun.json; cat $OUT/collector_stderr.txt | tail -5; tail -5 $OUT/measure_stderr.txt
