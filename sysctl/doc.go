// Package sysctl sizes the kernel's connection table, network buffers and
// backlogs to the machine's memory, as the node agent does at every start.
//
// A full connection (conntrack) table is the agent's to size: the kernel's
// defaults stop at 262,144 tracked connections whatever the memory, a
// 208 KiB socket buffer cap and a 1,000-packet input queue. [Targets]
// gives, for a memory size and CPU count, the value each key should hold
// and, in each [Target]'s Why, the rule behind it; the source of each
// key's sizing (targets.go) says where its figure comes from and what
// share of memory it may take. The keys:
//
//	net.netfilter.nf_conntrack_max      net.core.netdev_max_backlog
//	net.netfilter.nf_conntrack_buckets  net.core.rmem_max, wmem_max
//	net.core.somaxconn                  net.ipv4.tcp_rmem, tcp_wmem (max field)
//	net.ipv4.tcp_max_syn_backlog
//
// [Apply] raises each value that is lower than its target and never lowers
// one the host holds higher. Where a key cannot be written (a read-only
// /proc/sys in a Docker container, a host-only key inside a network
// namespace, no CAP_NET_ADMIN), it leaves the key in
// config/99-proofkit-sysctl.conf for the operator: copy it to
// /etc/sysctl.d/, run sudo sysctl --system, restart the agent. [Plan] is
// the dry run. Both return a [Report]: per key, the value found, the
// target, and what was done.
//
//	rep, err := sysctl.Apply(sysctl.Config{}) // /proc/sys, config/, MemTotal
//	if err != nil {
//		log.Error("sizing the kernel", "err", err)
//	}
//	for _, k := range rep.Keys {
//		log.Info(k.String()) // net.core.somaxconn: found 4096, target 65535: raised
//	}
//
// It writes only its own keys, through /proc/sys (it runs no sysctl
// command), and never a value it could not parse.
package sysctl
