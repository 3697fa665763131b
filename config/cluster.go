// cluster.go owns the [cluster] section: the etcd cluster this engine
// registers in and watches (discovery), off while etcd_endpoints is empty.
//
// Invariants:
//   - A daemon with etcd_endpoints set needs peer.listen too (CheckMember,
//     at mount): a member with no peer listener has nothing to advertise.
//     A client (orbitefs peer) only resolves names and needs no listener.
//   - The advertised address is a host:port peers can dial: a wildcard
//     listen address needs an explicit advertise.
//   - cert_file and key_file come together; every file named exists.

package config

import (
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Cluster configures discovery through etcd.
type Cluster struct {
	// EtcdEndpoints are etcd client URLs; empty turns discovery off.
	EtcdEndpoints []string `toml:"etcd_endpoints"`
	// Prefix roots every key of the cluster; begins and ends with '/'.
	Prefix string `toml:"prefix"`
	// LeaseTTL is how long a dead engine stays listed (whole seconds).
	LeaseTTL Duration `toml:"lease_ttl"`
	// Advertise is the host:port peers dial; "" takes peer.listen when
	// its host is a specific address.
	Advertise string `toml:"advertise"`
	// DialTimeout bounds the first connection to etcd at start.
	DialTimeout Duration `toml:"dial_timeout"`
	// CAFile, CertFile and KeyFile configure TLS to etcd.
	CAFile   string `toml:"ca_file"`
	CertFile string `toml:"cert_file"`
	KeyFile  string `toml:"key_file"`
}

// The bounds of [cluster].
const (
	MinLeaseTTL    = Duration(time.Second)
	MaxLeaseTTL    = Duration(time.Hour)
	maxClusterDial = Duration(5 * time.Minute)
)

// Enabled reports whether the daemon joins a cluster.
func (c Cluster) Enabled() bool { return len(c.EtcdEndpoints) > 0 }

// AdvertiseAddr is the address peers dial: advertise, or else the peer
// listener's bound address (peer.listen's specific host, with the port
// the kernel picked when it is 0).
func (c Cluster) AdvertiseAddr(bound string) string {
	if c.Advertise != "" {
		return c.Advertise
	}
	return bound
}

// validate checks every key, used or not: a bad value is refused even
// while etcd_endpoints is empty, so turning the cluster on never reveals
// an old mistake.
func (c *Cluster) validate(p *problems) {
	for _, e := range c.EtcdEndpoints {
		u, err := url.Parse(e)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			p.addf("cluster.etcd_endpoints: %q is not an etcd client URL such as http://10.0.0.2:2379 (http:// or https://, host:port, no path)", e)
			continue
		}
		if u.Port() == "" {
			p.addf("cluster.etcd_endpoints: %q has no port (etcd's client port is usually 2379)", e)
		}
	}
	if len(c.Prefix) < 2 || !strings.HasPrefix(c.Prefix, "/") || !strings.HasSuffix(c.Prefix, "/") {
		p.addf("cluster.prefix %q: want a key prefix that begins and ends with '/', such as \"/orbitefs/\"", c.Prefix)
	}
	if c.LeaseTTL < MinLeaseTTL || c.LeaseTTL > MaxLeaseTTL || c.LeaseTTL%Duration(time.Second) != 0 {
		p.addf("cluster.lease_ttl (%s) must be whole seconds in [1s, 1h]", c.LeaseTTL)
	}
	if c.DialTimeout < minPeerDuration || c.DialTimeout > maxClusterDial {
		p.addf("cluster.dial_timeout (%s) must be in [1ms, 5m]", c.DialTimeout)
	}
	if c.Advertise != "" {
		host, port, err := net.SplitHostPort(c.Advertise)
		n, perr := strconv.Atoi(port)
		switch {
		case err != nil || host == "":
			p.addf("cluster.advertise %q: want host:port that peers can dial, such as 10.0.0.7:7070", c.Advertise)
		case perr != nil || n < 1 || n > 65535:
			p.addf("cluster.advertise %q: port %q is not a number in [1, 65535]", c.Advertise, port)
		case isWildcard(host):
			p.addf("cluster.advertise %q: %s is a wildcard, not an address peers can dial", c.Advertise, host)
		}
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		p.addf("cluster.cert_file (%q) and cluster.key_file (%q) go together: set both or neither", c.CertFile, c.KeyFile)
	}
	for _, f := range []struct{ key, path string }{{"cluster.ca_file", c.CAFile}, {"cluster.cert_file", c.CertFile}, {"cluster.key_file", c.KeyFile}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			p.addf("%s %q: %v", f.key, f.path, err)
		}
	}
}

func isWildcard(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// CheckMember checks what only a cluster member (`orbitefs mount` with
// cluster.etcd_endpoints set) needs: a peer listener to advertise, at an
// address peers can dial. A client (`orbitefs peer`) reads [cluster] to
// resolve names and needs neither. Nil when the cluster is off.
func (d *Daemon) CheckMember() error {
	c, peer := d.Cluster, d.Peer
	if !c.Enabled() {
		return nil
	}
	var p problems
	if peer.Listen == "" {
		p.addf("cluster.etcd_endpoints is set but peer.listen is empty: a cluster member advertises its peer listener; set peer.listen (and peer.key_file)")
	} else if c.Advertise == "" {
		if host, _, err := net.SplitHostPort(peer.Listen); err == nil && (host == "" || isWildcard(host)) {
			p.addf("cluster.advertise is empty and peer.listen %q listens on every address: set cluster.advertise to the host:port peers dial", peer.Listen)
		}
	}
	return p.err("invalid config")
}
