// CoreDNS for dap's kind node image, with only the plugins kubeadm's Corefile uses. The stock
// build links every plugin, and with them the AWS, Azure and Google Cloud SDKs (route53, azure,
// clouddns): most of a cold build's time for code a cluster DNS never runs. This is CoreDNS's
// documented way to choose plugins at compile time (its own main plus blank imports), with the
// directive order kept as CoreDNS's generated list orders it.
package main

import (
	"slices"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// linked names the directives of the plugins imported above ("prometheus" is the metrics plugin).
var linked = []string{
	"cache", "errors", "forward", "health", "hosts", "kubernetes", "loadbalance", "log", "loop",
	"prometheus", "ready", "reload",
}

func init() {
	dnsserver.Directives = slices.DeleteFunc(slices.Clone(dnsserver.Directives), func(d string) bool {
		return !slices.Contains(linked, d)
	})
}

func main() {
	coremain.Run()
}
