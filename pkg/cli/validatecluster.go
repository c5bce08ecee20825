package cli

import (
	"context"
	"flag"
	"fmt"
	"strings"

	clientnetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/anchors"
	"github.com/globalconfig/globalconfig/pkg/render"
)

// validateClusterFlags are validate's flags that compare the file with
// the cluster: the live document's set and the EnvoyFilters of others
// that anchor on its filters (pkg/anchors). Without them validate is
// offline.
type validateClusterFlags struct {
	kubeconfig, configMap, root string
}

func (v *validateClusterFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&v.kubeconfig, "kubeconfig", "", "compare with the cluster of this kubeconfig: warn when the file removes or moves a filter an EnvoyFilter not managed by globalconfig anchors on")
	fs.StringVar(&v.configMap, "configmap", "", "compare with this live global ConfigMap, NAMESPACE/NAME (default "+DefaultConfigMap+"; either flag turns the comparison on)")
	fs.StringVar(&v.root, "mesh-root-namespace", envoyfilter.DefaultNamespace, "Istio's root namespace, for the comparison")
}

// set reports whether the comparison was asked for.
func (v *validateClusterFlags) set() bool { return v.kubeconfig != "" || v.configMap != "" }

// compareWithCluster warns, on stderr, of each dependent (an EnvoyFilter
// of others anchored on a filter of the live document's set) that objs,
// the file's set, leaves without its filter or moves; stdout gets one
// line on what was compared. The code is ExitAPI when the cluster can't
// be read: a comparison asked for and not made is not a pass.
func compareWithCluster(v *validateClusterFlags, file string, objs []*envoyfilter.Object, env Env) int {
	cf := clusterFlags{kubeconfig: v.kubeconfig, configMap: v.configMap, output: "text"}
	if cf.configMap == "" {
		cf.configMap = DefaultConfigMap
	}
	ns, name, code := cf.check("validate", env)
	if code != ExitOK {
		return code
	}
	kube, istio, code := cf.connect("validate", env)
	if code != ExitOK {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), APITimeout)
	defer cancel()
	key := ns + "/" + name
	cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		fmt.Fprintf(env.Stdout, "cluster: ConfigMap %s not found: no live set to compare with\n", key)
		return ExitOK
	case err != nil:
		fmt.Fprintf(env.Stderr, "globalconfig validate: read configmap %s: %v\n", key, err)
		return ExitAPI
	}
	live := render.New().FromConfigMap(cm.Data)
	if !live.Valid() {
		fmt.Fprintf(env.Stdout, "cluster: the document in ConfigMap %s is invalid (the controller keeps the last good EnvoyFilters): not compared\n", key)
		return ExitOK
	}
	list, err := istio.NetworkingV1alpha3().EnvoyFilters(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		LabelSelector: envoyfilter.LabelManagedBy + "!=" + envoyfilter.ManagedByValue,
	})
	if err != nil {
		fmt.Fprintf(env.Stderr, "globalconfig validate: list envoyfilters: %v\n", err)
		return ExitAPI
	}
	others := make([]anchors.Other, 0, len(list.Items))
	for _, ef := range list.Items {
		others = append(others, otherOf(ef))
	}
	deps := anchors.Find(live.Objects, others, v.root)
	warnings := anchors.Compare(live.Objects, objs, others, v.root)
	for _, w := range warnings {
		fmt.Fprintf(env.Stderr, "%s: warning: %s\n", location(file, 0), strings.Replace(w.String(), "this edit", "applying it", 1))
	}
	fmt.Fprintf(env.Stdout, "cluster: compared with ConfigMap %s: %d EnvoyFilter patch(es) of others anchor on its filters, %d lose or move their filter\n",
		key, len(deps), len(warnings))
	return ExitOK
}

// otherOf is a listed EnvoyFilter as pkg/anchors reads it.
func otherOf(ef *clientnetworking.EnvoyFilter) anchors.Other {
	return anchors.Other{Namespace: ef.Namespace, Name: ef.Name, Labels: ef.Labels, Spec: &ef.Spec}
}
