# netpair.sh, sourced by the peer benchmarks: two network namespaces $A
# and $B joined by a veth pair ${A}0 / ${B}0 with $ipa/30 and $ipb/30,
# links and loopbacks up. inA and inB run a command in either namespace.
inA() { nsenter --net=/var/run/netns/$A "$@"; }
inB() { nsenter --net=/var/run/netns/$B "$@"; }
netpair() {
	ip netns add $A
	ip netns add $B
	ip link add "${A}0" netns $A type veth peer name "${B}0" netns $B
	inA ip addr add $ipa/30 dev "${A}0"
	inB ip addr add $ipb/30 dev "${B}0"
	inA ip link set dev "${A}0" up
	inB ip link set dev "${B}0" up
	inA ip link set dev lo up
	inB ip link set dev lo up
}
