# PID 1 of a fleetctl lab host, run by bash inside the host's fresh PID,
# mount, UTS and IPC namespaces (and its network namespace).
# Arguments: host name, /data size in bytes, sshd config, sshd log, wake-up fifo.
set -u
name=$1 data_size=$2 sshd_config=$3 sshd_log=$4 fifo=$5

# Private /data and /tmp: the mount namespace is private, so these are
# invisible to the machine and to the other hosts.
mount -t tmpfs -o "size=$data_size,mode=0755" lab-data /data || exit 20
mount -t tmpfs -o mode=1777 lab-tmp /tmp || exit 21
# A fresh root home, as on a new server: the machine's own (with whatever
# its shell startup files run) would be read by every ssh command's shell.
mount -t tmpfs -o mode=0700 lab-home /root || exit 24
for f in .bashrc .profile; do
    [ -f "/etc/skel/$f" ] && cp "/etc/skel/$f" "/root/$f"
done
hostname "$name" || exit 22
# The copies of other network namespaces' handles are of no use in here.
umount -l /run/netns 2>/dev/null

# Reading a fifo held open for writing by ourselves blocks without a child
# process; a trapped signal interrupts the read.
exec 3<>"$fifo" || exit 23

start_sshd() {
    /usr/sbin/sshd -D -f "$sshd_config" -E "$sshd_log" &
}
# The lab asks for sshd to come back (after stop_sshd) with SIGUSR1.
trap start_sshd USR1
start_sshd

# PID 1 must reap every process that ends on this host, adopted orphans
# included: bash does that whenever SIGCHLD arrives, while waiting here.
while :; do
    wait
    read -r -t 1 -u 3 _
done
