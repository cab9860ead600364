#!/usr/bin/env bash
# Install and start a real single-node SLURM cluster on this machine (Debian 12, root, no systemd).
#
# Why each piece:
#   munge          SLURM authenticates every RPC with munge; munged must run as user munge.
#   slurmctld      the controller (sbatch/squeue talk to it).
#   slurmd         the compute daemon of our one node (NodeAddr=127.0.0.1, CPUs=$(nproc)).
#   slurmdbd +     accounting: submitit polls job states with `sacct`, which only answers when
#   mariadb        accounting storage is slurmdbd. Without it a job that dies before writing
#                  its result pickle is never seen as finished.
#   proctrack/linuxproc, task/none: cgroup plugins need systemd/cgroupfs delegation we lack.
#
# Idempotent: safe to run twice (running daemons are left alone, configs rewritten only when
# they change, the database and user are created IF NOT EXISTS). Exits non-zero if sbatch
# cannot run a trivial job to completion.
#
# Usage: .ci/slurm.sh            (prints "slurm: ok (<seconds> s for a trivial job)")
#        SLURM_SKIP_INSTALL=1 .ci/slurm.sh   (never call apt-get)
set -euo pipefail

log() { echo "slurm: $*" >&2; }
die() { log "FAILED: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (installs packages and starts daemons)"

# ------------------------------------------------------------------------------ packages
PKGS=(slurmd slurmctld slurm-client munge slurmdbd mariadb-server)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    [ -z "${SLURM_SKIP_INSTALL:-}" ] || die "packages missing and SLURM_SKIP_INSTALL set: ${missing[*]}"
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # The package lists may be absent in a fresh container; update once if the install fails.
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/tmp/slurm-apt.log 2>&1 \
        || { apt-get update -q >/tmp/slurm-apt.log 2>&1 \
             && apt-get install -y -q --no-install-recommends "${missing[@]}" >>/tmp/slurm-apt.log 2>&1; } \
        || { tail -20 /tmp/slurm-apt.log >&2; die "apt-get install ${missing[*]}"; }
fi

HOST="$(hostname -s)"
NCPU="$(nproc)"
# Leave 1 GiB to the OS; without RealMemory SLURM assumes 1 MB and rejects any --mem request.
MEM_MB=$(( $(awk '/MemTotal/ {print int($2/1024)}' /proc/meminfo) - 1024 ))
STATE=/var/spool/slurmctld
SPOOL=/var/spool/slurmd
LOGDIR=/var/log/slurm
mkdir -p "$STATE" "$SPOOL" "$LOGDIR" /run/munge /var/lib/munge /var/log/munge /etc/slurm

# Write a file only when its content changes, so a second run does not touch running daemons.
# Returns 0 when the file changed.
write_if_changed() {  # path mode owner <content on stdin>
    local path="$1" mode="$2" owner="$3" tmp
    tmp="$(mktemp)"
    cat >"$tmp"
    if [ -f "$path" ] && cmp -s "$tmp" "$path"; then rm -f "$tmp"; return 1; fi
    install -m "$mode" -o "${owner%%:*}" -g "${owner##*:}" "$tmp" "$path"
    rm -f "$tmp"
    return 0
}

# -------------------------------------------------------------------------------- munge
chown -R munge:munge /run/munge /var/lib/munge /var/log/munge /etc/munge
chmod 0755 /run/munge
chmod 0700 /etc/munge /var/lib/munge /var/log/munge
if [ ! -s /etc/munge/munge.key ]; then
    log "creating munge key"
    runuser -u munge -- /usr/sbin/mungekey --create --keyfile=/etc/munge/munge.key
fi
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    log "starting munged"
    rm -f /run/munge/munged.pid
    runuser -u munge -- /usr/sbin/munged
    for _ in $(seq 20); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.5; done
    munge -n | unmunge >/dev/null || die "munged does not answer"
fi

# ------------------------------------------------------------------------------ mariadb
if ! mysqladmin --protocol=socket ping >/dev/null 2>&1; then
    log "starting mariadb"
    mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
    # mysqld_safe daemonizes the server and restarts it if it dies; its own log goes to syslog.
    (setsid mysqld_safe --user=mysql >/var/log/slurm/mysqld_safe.log 2>&1 &)
    for _ in $(seq 60); do mysqladmin --protocol=socket ping >/dev/null 2>&1 && break; sleep 0.5; done
    mysqladmin --protocol=socket ping >/dev/null 2>&1 || die "mariadb does not answer"
fi
# root connects over the unix socket (unix_socket auth, no password); slurmdbd gets its own user.
mysql --protocol=socket -e "
    CREATE DATABASE IF NOT EXISTS slurm_acct_db;
    CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmdbpass';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
    FLUSH PRIVILEGES;" || die "cannot create the accounting database"

# ----------------------------------------------------------------------------- configs
dbd_changed=0
write_if_changed /etc/slurm/slurmdbd.conf 600 root:root <<EOF && dbd_changed=1
# Written by rlexp .ci/slurm.sh: accounting for the single-node test cluster.
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
SlurmUser=root
DebugLevel=info
LogFile=$LOGDIR/slurmdbd.log
PidFile=/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurmdbpass
StorageLoc=slurm_acct_db
EOF

conf_changed=0
write_if_changed /etc/slurm/slurm.conf 644 root:root <<EOF && conf_changed=1
# Written by rlexp .ci/slurm.sh: one node, this machine, reached over loopback.
ClusterName=rlexp
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE
SlurmdSpoolDir=$SPOOL
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOGDIR/slurmctld.log
SlurmdLogFile=$LOGDIR/slurmd.log
# No systemd/cgroup delegation in this container: track processes by /proc, bind no tasks.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# submitit reads job states with sacct, which needs slurmdbd.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=5
Waittime=0
MpiDefault=none
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$NCPU RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
# cgroup.conf is read even with task/none on 22.05; keep it harmless.
write_if_changed /etc/slurm/cgroup.conf 644 root:root <<'EOF' || true
CgroupPlugin=cgroup/v1
CgroupAutomount=no
ConstrainCores=no
ConstrainRAMSpace=no
EOF

# ----------------------------------------------------------------------------- daemons
running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

if running /run/slurmdbd.pid && [ "$dbd_changed" -eq 0 ]; then :; else
    if running /run/slurmdbd.pid; then log "restarting slurmdbd (config changed)"; kill "$(cat /run/slurmdbd.pid)"; sleep 1; fi
    log "starting slurmdbd"
    /usr/sbin/slurmdbd
    for _ in $(seq 40); do sacctmgr -n -i list cluster >/dev/null 2>&1 && break; sleep 0.5; done
fi
sacctmgr -n -i list cluster >/dev/null 2>&1 || { tail -5 $LOGDIR/slurmdbd.log >&2; die "slurmdbd does not answer"; }
sacctmgr -n list cluster format=cluster | grep -qw rlexp || sacctmgr -i add cluster rlexp >/dev/null

restart_ctl=0
if running /run/slurmctld.pid; then
    if [ "$conf_changed" -eq 1 ]; then restart_ctl=1; fi
else
    restart_ctl=1
fi
if [ "$restart_ctl" -eq 1 ]; then
    for pidf in /run/slurmd.pid /run/slurmctld.pid; do
        if running "$pidf"; then kill "$(cat "$pidf")"; sleep 1; fi
    done
    log "starting slurmctld and slurmd"
    /usr/sbin/slurmctld
    /usr/sbin/slurmd -N "$HOST"
elif ! running /run/slurmd.pid; then
    log "starting slurmd"
    /usr/sbin/slurmd -N "$HOST"
fi

# Wait for the node to be usable; resume it if a previous run left it DOWN/DRAINED. A state
# with a suffix ("idle*": not responding, "idle~": powered down) is not usable yet.
wait_node() {
    for _ in $(seq 60); do
        st="$(sinfo -h -n "$HOST" -o %T 2>/dev/null || true)"
        case "$st" in
            idle|mixed|allocated) return 0 ;;
            down*|drain*) scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 || true ;;
        esac
        sleep 0.5
    done
    return 1
}

# What a failed start left behind, on stderr, so a CI log alone says why.
diagnose() {
    log "node: $(sinfo -h -n "$HOST" -o '%T %E' 2>&1)"
    log "jobs: $(squeue -h -o '%i %T %r' 2>&1 | tr '\n' ';')"
    [ -s "$out/sbatch.err" ] && log "sbatch said: $(tr '\n' ' ' <"$out/sbatch.err")"
    for f in slurmctld slurmd; do log "tail of $LOGDIR/$f.log:"; tail -8 "$LOGDIR/$f.log" >&2 || true; done
}

# -------------------------------------------------------------------------- smoke test
out="$(mktemp -d)"
smoke() {
    wait_node || { log "node $HOST is '${st:-unknown}'"; return 1; }
    timeout 120 sbatch --wait --quiet -o "$out/%j.out" -t 1 --wrap 'echo slurm-ok on $(hostname)' \
        2>"$out/sbatch.err" && grep -qs slurm-ok "$out"/*.out
}
t0=$(date +%s.%N)
if ! smoke; then
    # A daemon that came up before its peer can leave the first job unrunnable (seen once in CI,
    # whose log had only "sbatch failed"): say what was seen, restart slurmd, try once more.
    log "trivial job failed; restarting slurmd and trying again"
    diagnose
    scancel --quiet --user=root 2>/dev/null || true
    if running /run/slurmd.pid; then kill "$(cat /run/slurmd.pid)"; sleep 1; fi
    /usr/sbin/slurmd -N "$HOST"
    t0=$(date +%s.%N)
    smoke || { diagnose; die "sbatch of a trivial job failed twice (logs above, $LOGDIR)"; }
fi
t1=$(date +%s.%N)
rm -rf "$out"
sacct -n -X -o JobID,State -S now-1hour >/dev/null || die "sacct does not answer"
log "ok ($(awk "BEGIN {printf \"%.1f\", $t1 - $t0}") s for a trivial job; $NCPU CPUs, ${MEM_MB} MB)"
