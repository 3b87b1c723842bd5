#!/usr/bin/env bash
# A throwaway one-node Slurm on this machine, for tests/test_slurm.py (`make test-slurm`).
#
#   scripts/slurm-cluster.sh start   install (apt, root) if missing; configure one node and one partition
#                                    `debug` under $SLURM_TEST_DIR; start munged, slurmctld and slurmd there
#   scripts/slurm-cluster.sh stop    cancel every job of this cluster, then stop exactly the daemons `start`
#                                    started (by the pids it recorded); says so if any process is left
#   scripts/slurm-cluster.sh env     the line to source for its clients: export SLURM_CONF=...
#
# Everything lives in $SLURM_TEST_DIR (default /tmp/residual-slurm): its own munge key and socket, its own
# ports, its own config (clients find it through SLURM_CONF), so a system Slurm or munge is left alone.
# Accounting is off (sacct fails), as on a small cluster without slurmdbd. Memory is enforced by the
# accounting poll (OverMemoryKill: an over-limit job ends OUT_OF_MEMORY) since cgroups are not ours here.
set -euo pipefail
DIR=${SLURM_TEST_DIR:-/tmp/residual-slurm}
PORT=${SLURM_TEST_PORT:-16817}
CONF=$DIR/slurm.conf
NODE=$(hostname -s)
# Slots, not cores: several jobs of a test run at once on a 2-core machine (config_overrides allows it).
CPUS=${SLURM_TEST_CPUS:-8}
MEM_MB=${SLURM_TEST_MEM_MB:-8000}

say() { echo "slurm-cluster: $*" >&2; }

install() {
  local missing=()
  for cmd in munged slurmctld slurmd sbatch; do command -v "$cmd" >/dev/null || missing+=("$cmd"); done
  [ ${#missing[@]} = 0 ] && return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    say "missing ${missing[*]}; install slurmctld slurmd slurm-client munge (needs root and apt)"
    exit 3
  fi
  say "installing slurmctld slurmd slurm-client munge (apt)"
  # policy-rc.d or not: the packages' own services are not wanted, this script starts its own daemons.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmctld slurmd slurm-client munge >/dev/null \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmctld slurmd slurm-client munge >/dev/null; }
}

configure() {
  rm -rf "$DIR"/ctld "$DIR"/d  # a fresh cluster: no jobs of an earlier one, job ids from 1
  mkdir -p "$DIR"/munge "$DIR"/ctld "$DIR"/d "$DIR"/log
  chmod 700 "$DIR"/munge
  [ -f "$DIR"/munge/munge.key ] || { dd if=/dev/urandom bs=1 count=1024 of="$DIR"/munge/munge.key 2>/dev/null; }
  chmod 400 "$DIR"/munge/munge.key
  cat >"$CONF" <<EOF
ClusterName=residual-test
SlurmctldHost=$NODE
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$DIR/d
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill
# Quick to notice a lost node and to kill a job past its limit; finished jobs stay in scontrol 5 minutes.
SlurmdTimeout=30
KillWait=5
MinJobAge=300
ReturnToService=2
DefMemPerCPU=1000
NodeName=$NODE CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start() {
  install
  if alive "$DIR"/slurmctld.pid; then say "already running (stop it first)"; exit 1; fi
  configure
  export SLURM_CONF=$CONF
  (  # the daemons get no descriptor of ours: munged keeps what it inherits, and under `flock LOCK make
     # test-slurm` it held the lock for as long as it ran
    for fd in /proc/$BASHPID/fd/*; do fd=${fd##*/}; [ "$fd" -gt 2 ] && eval "exec $fd>&-"; done
    munged --force --key-file="$DIR"/munge/munge.key --socket="$DIR"/munge/munge.socket \
      --pid-file="$DIR"/munged.pid --log-file="$DIR"/log/munged.log --seed-file="$DIR"/munge/munged.seed
    slurmctld -f "$CONF"
    slurmd -f "$CONF" -N "$NODE"
  )
  for _ in $(seq 60); do  # the node registers within a few seconds
    if sinfo -h -N -o %t 2>/dev/null | grep -qx idle; then say "up: node $NODE, partition debug ($CONF)"; return 0; fi
    sleep 0.5
  done
  say "the node did not come up; logs in $DIR/log"
  sinfo -N -l >&2 || true
  stop
  exit 1
}

stop() {
  export SLURM_CONF=$CONF
  if alive "$DIR"/slurmctld.pid; then
    scancel --full --quiet $(squeue -h -o %A 2>/dev/null | sort -u) 2>/dev/null || true
    for _ in $(seq 40); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.5; done
  fi
  local left=()
  for name in slurmd slurmctld munged; do  # the node first: it may still be tidying up a job
    local pidfile=$DIR/$name.pid
    alive "$pidfile" || continue
    local pid
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; sleep 0.2; fi
    kill -0 "$pid" 2>/dev/null && left+=("$name($pid)")
    rm -f "$pidfile"
  done
  if [ ${#left[@]} != 0 ]; then say "still running: ${left[*]}"; exit 1; fi
  say "stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  install) install ;;
  *) echo "usage: $0 start|stop|env|install" >&2; exit 2 ;;
esac
