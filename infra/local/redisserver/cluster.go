package redisserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rallyhq/rally/infra/local/subprocess"
)

// slots is how many hash slots a Redis Cluster has.
const slots = 16384

// Cluster is a local Redis Cluster: redis-servers on loopback ports, each a
// primary owning an equal share of the hash slots (no replicas), as an
// ElastiCache cluster spreads slots over its shards. Keys under different
// hash tags land on different nodes, so a command that spans slots fails
// with CROSSSLOT as it would in AWS.
type Cluster struct {
	Nodes []*Server
	buses []int  // each node's cluster bus port
	dir   string // removed on Close when StartCluster made it
}

// StartCluster starts n nodes (at least one), joins them, assigns each its
// range of slots, and returns once every node reports the cluster ok and
// knows every other. The nodes keep their cluster files in dir (a
// temporary directory when empty).
func StartCluster(ctx context.Context, n int, dir string) (*Cluster, error) {
	if n < 1 {
		return nil, errors.New("redisserver: a cluster needs at least one node")
	}
	c := &Cluster{}
	if dir == "" {
		tmp, err := os.MkdirTemp("", "redis-cluster-")
		if err != nil {
			return nil, fmt.Errorf("redisserver: %w", err)
		}
		dir, c.dir = tmp, tmp
	}
	for i := range n {
		// The cluster bus gets a free port of its own: by default it is the
		// node's port + 10000, which may be taken (or past 65535).
		bus, err := subprocess.FreePort()
		if err != nil {
			c.Close()
			return nil, err
		}
		s, err := StartWith(ctx, Options{Dir: dir, Args: []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes-"+strconv.Itoa(i)+".conf"),
			"--cluster-port", strconv.Itoa(bus),
		}})
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Nodes, c.buses = append(c.Nodes, s), append(c.buses, bus)
	}
	if err := c.form(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// form gives each node a distinct config epoch and its slots, introduces
// every node to the first, and waits for the cluster to agree.
func (c *Cluster) form(ctx context.Context) error {
	admins := make([]*redis.Client, len(c.Nodes))
	for i, s := range c.Nodes {
		admins[i] = redis.NewClient(&redis.Options{Addr: s.Addr()})
		defer admins[i].Close()
	}
	for i, a := range admins {
		first, last := i*slots/len(admins), (i+1)*slots/len(admins)-1
		if err := a.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("redisserver: cluster node %d: set config epoch: %w", i, err)
		}
		if err := a.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", first, last).Err(); err != nil {
			return fmt.Errorf("redisserver: cluster node %d: assign slots %d-%d: %w", i, first, last, err)
		}
		if i > 0 {
			if err := admins[0].Do(ctx, "CLUSTER", "MEET", "127.0.0.1", c.Nodes[i].Port(), c.buses[i]).Err(); err != nil {
				return fmt.Errorf("redisserver: cluster node %d: meet: %w", i, err)
			}
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	want := "cluster_known_nodes:" + strconv.Itoa(len(admins))
	for {
		agreed := true
		for _, a := range admins {
			info, err := a.ClusterInfo(wctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, want) {
				agreed = false
				break
			}
		}
		if agreed {
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("redisserver: the cluster of %d nodes did not agree: %w", len(admins), wctx.Err())
		case <-time.After(20 * time.Millisecond): // gossip has no event to await
		}
	}
}

// Addrs are the nodes' host:port, the seeds a cluster client starts from.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		out[i] = s.Addr()
	}
	return out
}

// URL is the first node's redis:// URL: a cluster client given it (with
// cluster mode on) discovers the others.
func (c *Cluster) URL() string { return c.Nodes[0].URL() }

// Close stops every node and removes the directory StartCluster made.
func (c *Cluster) Close() error {
	for _, s := range c.Nodes {
		_ = s.Close()
	}
	if c.dir != "" {
		return os.RemoveAll(c.dir)
	}
	return nil
}
