package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	clientnetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	istioinformers "istio.io/client-go/pkg/informers/externalversions"
	istiolisters "istio.io/client-go/pkg/listers/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/globalconfig/globalconfig/envoyfilter"
	"github.com/globalconfig/globalconfig/pkg/members"
	"github.com/globalconfig/globalconfig/pkg/plan"
	"github.com/globalconfig/globalconfig/pkg/rollout"
	"github.com/globalconfig/globalconfig/pkg/status"
)

// clusterTarget is one config cluster the kube sink writes to: the home
// cluster or a member. It holds the cluster's cache of managed
// EnvoyFilters, overlaid with the objects our own applies returned.
type clusterTarget struct {
	name  string
	istio istioclient.Interface
	// lister reads the informer's cache; written overlays it with our
	// updates, newer by resourceVersion, so a sync that runs before the
	// informer shows our write does not write again.
	lister  istiolisters.EnvoyFilterLister
	written cache.MutationCache
	// created are the objects our applies created, by key, until the
	// informer shows them. The cache alone can't tell "not seen yet" from
	// "deleted since"; the informer's resourceVersion can: an object
	// missing from a cache that has seen everything up to the create's
	// resourceVersion was deleted since, and is created again.
	created  map[string]*clientnetworking.EnvoyFilter
	cacheRev func() string
	synced   func() bool

	// Members only.
	member members.Member
	stop   context.CancelFunc
	// watchErr is the informer's last list or watch error, "" after a
	// successful list (guarded by mu).
	mu       sync.Mutex
	watchErr string

	// The last delivery (worker only): the set hash it converged to, when
	// the cluster got that set, how many objects it holds, and the error
	// of the last attempt.
	set     string
	heldSet []*envoyfilter.Object
	setAt   time.Time
	objects int
	err     error
}

func newClusterTarget(name string, istio istioclient.Interface, informer cache.SharedIndexInformer) *clusterTarget {
	return &clusterTarget{
		name: name, istio: istio,
		lister:   istiolisters.NewEnvoyFilterLister(informer.GetIndexer()),
		written:  cache.NewIntegerResourceVersionMutationCache(klog.Background(), informer.GetStore(), nil, writeMemory, false),
		created:  map[string]*clientnetworking.EnvoyFilter{},
		cacheRev: informer.LastSyncResourceVersion,
		synced:   informer.HasSynced,
	}
}

// listed are the managed EnvoyFilters of the cluster: the newer of the
// cache and our own last write.
func (t *clusterTarget) listed() ([]*clientnetworking.EnvoyFilter, error) {
	listed, err := t.lister.List(labels.SelectorFromSet(labels.Set{envoyfilter.LabelManagedBy: envoyfilter.ManagedByValue}))
	if err != nil {
		return nil, fmt.Errorf("list envoyfilters: %w", err)
	}
	out := make([]*clientnetworking.EnvoyFilter, 0, len(listed))
	for _, l := range listed {
		if obj, ok, err := t.written.GetByKey(l.Namespace + "/" + l.Name); err == nil && ok {
			l = obj.(*clientnetworking.EnvoyFilter)
		}
		out = append(out, l)
	}
	return out, nil
}

// live are the managed EnvoyFilters by key, with the objects this term
// created that the cache has not shown yet.
func (t *clusterTarget) live() (map[string]*clientnetworking.EnvoyFilter, error) {
	listed, err := t.listed()
	if err != nil {
		return nil, err
	}
	live := make(map[string]*clientnetworking.EnvoyFilter, len(listed))
	for _, l := range listed {
		key := l.Namespace + "/" + l.Name
		live[key] = l
		delete(t.created, key)
	}
	for key, obj := range t.created {
		if _, ok := live[key]; ok {
			continue
		}
		if olderThan(t.cacheRev(), obj.ResourceVersion) {
			live[key] = obj // created by us; the cache hasn't seen it yet
		} else {
			delete(t.created, key) // seen, and deleted since
		}
	}
	return live, nil
}

// wrote remembers an applied object until the cache shows it.
func (t *clusterTarget) wrote(key string, update bool, applied *clientnetworking.EnvoyFilter) {
	if update {
		t.written.Mutation(applied)
	} else {
		t.created[key] = applied
	}
}

func (t *clusterTarget) deleted(key string) { delete(t.created, key) }

func (t *clusterTarget) setWatchErr(msg string) {
	t.mu.Lock()
	t.watchErr = msg
	t.mu.Unlock()
}

func (t *clusterTarget) lastWatchErr() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.watchErr
}

// memberSet are the member clusters the controller delivers to, as the
// member Secrets name them; changed from the Secrets' watcher, read by
// the worker.
type memberSet struct {
	mu       sync.Mutex
	targets  map[string]*clusterTarget
	problems []members.Problem
	// known says member Secrets were ever seen: only then does the status
	// list clusters (a single-cluster install's status is unchanged).
	known bool
}

// snapshot are the members, sorted by name, and the Secrets' problems.
func (s *memberSet) snapshot() ([]*clusterTarget, []members.Problem, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*clusterTarget, 0, len(s.targets))
	for _, t := range s.targets {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b *clusterTarget) int { return strings.Compare(a.name, b.name) })
	return out, slices.Clone(s.problems), s.known
}

// HomeName is the home cluster's name.
func (c *Controller) HomeName() string { return c.homeName() }

func (c *Controller) homeName() string {
	if c.cfg.ClusterName != "" {
		return c.cfg.ClusterName
	}
	return members.DefaultHome
}

// SetMembers makes the member clusters those of ms: a new member (or one
// whose Secret changed) gets its clients and its cache of managed
// EnvoyFilters, which runs until ctx ends or the member goes; a member
// whose Secret is gone is no longer managed, and its EnvoyFilters stay
// where they are. Called by the member Secrets' watcher; enqueues a
// sync.
func (c *Controller) SetMembers(ctx context.Context, ms []members.Member, problems []members.Problem) {
	c.members.mu.Lock()
	if c.members.targets == nil {
		c.members.targets = map[string]*clusterTarget{}
	}
	c.members.known = c.members.known || len(ms) > 0 || len(problems) > 0
	c.members.problems = problems
	want := map[string]members.Member{}
	for _, m := range ms {
		want[m.Name] = m
	}
	for name, t := range c.members.targets {
		if m, ok := want[name]; !ok || m.Fingerprint != t.member.Fingerprint {
			t.stop()
			delete(c.members.targets, name)
			if !ok {
				c.log.Info("member cluster removed: its EnvoyFilters are no longer managed, and stay in place", "cluster", name, "secret", t.member.Secret)
			}
		}
	}
	for _, m := range ms {
		if _, ok := c.members.targets[m.Name]; ok {
			continue
		}
		t, err := c.startMember(ctx, m)
		if err != nil {
			c.members.problems = append(c.members.problems, members.Problem{Secret: m.Secret, Name: m.Name, Message: err.Error()})
			continue
		}
		c.members.targets[m.Name] = t
		c.log.Info("member cluster added", "cluster", m.Name, "secret", m.Secret)
	}
	c.members.mu.Unlock()
	if c.cfg.MembersChanged != nil {
		c.cfg.MembersChanged(ms)
	}
	c.Enqueue()
}

// startMember builds a member's clients and starts its cache of managed
// EnvoyFilters.
func (c *Controller) startMember(ctx context.Context, m members.Member) (*clusterTarget, error) {
	newClient := c.cfg.MemberClient
	if newClient == nil {
		newClient = func(m members.Member) (istioclient.Interface, error) { return istioclient.NewForConfig(m.Config) }
	}
	istio, err := newClient(m)
	if err != nil {
		return nil, fmt.Errorf("istio client: %w", err)
	}
	f := istioinformers.NewSharedInformerFactoryWithOptions(istio, c.cfg.Resync,
		istioinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = envoyfilter.LabelManagedBy + "=" + envoyfilter.ManagedByValue
		}))
	inf := f.Networking().V1alpha3().EnvoyFilters().Informer()
	t := newClusterTarget(m.Name, istio, inf)
	t.member = m
	if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		t.setWatchErr(err.Error())
		c.Enqueue()
	}); err != nil {
		return nil, err
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { t.setWatchErr(""); c.Enqueue() },
		UpdateFunc: func(any, any) { c.Enqueue() },
		DeleteFunc: func(any) { c.Enqueue() },
	}); err != nil {
		return nil, err
	}
	mctx, cancel := context.WithCancel(ctx)
	t.stop = func() { cancel(); f.Shutdown() }
	f.Start(mctx.Done())
	go func() {
		// A member listed at last (it was down at start) converges
		// without an edit.
		if cache.WaitForCacheSync(mctx.Done(), inf.HasSynced) {
			t.setWatchErr("")
			c.Enqueue()
		}
	}()
	return t, nil
}

// errMembers says the set did not reach every member; the sync is
// retried with backoff until it does.
type errMembers struct{ failed []string }

func (e errMembers) Error() string {
	return "the set did not reach every member cluster: " + strings.Join(e.failed, "; ")
}

// deliverClusters converges the home cluster and every member to set,
// each to the objects its target.clusters give it (envoyfilter.ForCluster).
// A home failure fails the delivery as before members existed; a
// member's failure is recorded for its status entry, holds nothing else
// back, and is retried (membersErr).
func (c *Controller) deliverClusters(ctx context.Context, set []*envoyfilter.Object) ([]string, error) {
	targets, _, _ := c.members.snapshot()
	if len(targets) == 0 && c.st.stages.plan == nil {
		// One cluster, as before members existed.
		part, hash, _ := c.partFor(c.home.name, set)
		writes, err := c.converge(ctx, c.home, part)
		c.home.record(hash, part, len(part), err, c.now())
		return writes, err
	}
	// Every cluster is planned first, the writes are fenced once (under
	// a canary rollout), then each cluster is written at the same time as
	// the others: an edit reaches the last cluster about as soon as the
	// first.
	type job struct {
		t       *clusterTarget
		part    []*envoyfilter.Object
		mine    []*envoyfilter.Object
		hash    string
		planned []plan.Write
		writes  []string
		err     error
	}
	var jobs []*job
	anyWrite := false
	for _, t := range append([]*clusterTarget{c.home}, targets...) {
		part, hash, ok := c.partFor(t.name, set)
		if !ok {
			continue // a rollout across clusters keeps what it has
		}
		j := &job{t: t, part: part, mine: forCluster(part, t.name), hash: hash}
		switch {
		case t != c.home && !t.synced():
			// The home cluster's cache synced before the term began.
			j.err = fmt.Errorf("its managed EnvoyFilters could not be listed yet")
			if msg := t.lastWatchErr(); msg != "" {
				j.err = fmt.Errorf("%w: %s", j.err, msg)
			}
		default:
			j.planned, j.err = c.planFor(t, j.mine)
			anyWrite = anyWrite || len(j.planned) > 0
		}
		jobs = append(jobs, j)
	}
	if anyWrite && (c.st.fence || c.stagedCanary()) {
		if err := c.fenceStatus(ctx); err != nil {
			return nil, err
		}
		c.st.fence = false
	}
	var wg sync.WaitGroup
	for _, j := range jobs {
		if j.err != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var look sync.WaitGroup
			if tr := c.cfg.Rollout; tr != nil {
				// Which pushes this cluster's istiods sent before its part
				// reached them: their stores are read while it is written.
				read := tr.StartDeliveringTo(ctx, j.t.name, j.mine, rollout.ScopeOf(j.mine, c.root()))
				look.Go(read)
			}
			j.writes, j.err = c.write(ctx, j.t, j.planned)
			look.Wait()
		}()
	}
	wg.Wait()
	var writes []string
	var homeErr error
	for _, j := range jobs {
		j.t.record(j.hash, j.part, len(j.mine), j.err, c.now())
		if j.t == c.home {
			writes, homeErr = append(writes, j.writes...), j.err
			continue
		}
		if errors.Is(j.err, errNotLeading) {
			homeErr = j.err
		}
		for _, x := range j.writes {
			writes = append(writes, x+" in cluster "+j.t.name)
		}
	}
	// A home failure fails the delivery as before members existed; a
	// member's is in its status entry, and retried (membersErr).
	return writes, homeErr
}

// stagedCanary says whether the plan is a rollout across clusters under
// strategy Canary: its writes are fenced by the status, as a canary
// phase's are, so a replica that lost its lease touches no proxy.
func (c *Controller) stagedCanary() bool {
	out := c.st.stages.out
	return c.st.stages.plan != nil && out != nil && out.Label != ""
}

// record notes a delivery attempt of set (hash) with n objects for the
// cluster.
func (t *clusterTarget) record(hash string, set []*envoyfilter.Object, n int, err error, now time.Time) {
	t.err = err
	if err != nil {
		return
	}
	if t.set != hash {
		t.set, t.setAt = hash, now
	}
	t.heldSet, t.objects = set, n
}

// membersErr is the members the last delivery did not reach, nil when it
// reached all.
func (c *Controller) membersErr() error {
	targets, _, _ := c.members.snapshot()
	var failed []string
	for _, t := range targets {
		if t.err != nil {
			failed = append(failed, fmt.Sprintf("cluster %s: %v", t.name, t.err))
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return errMembers{failed: failed}
}

// clustersStatus is the status's clusters section: the home cluster
// first, then every member by name, then the member Secrets that give no
// member; nil while no member Secret was ever seen.
func (c *Controller) clustersStatus() []status.Cluster {
	targets, problems, known := c.members.snapshot()
	if !known {
		return nil
	}
	entry := func(t *clusterTarget, home bool) status.Cluster {
		e := status.Cluster{Name: t.name, Home: home, Secret: t.member.Secret, Reachable: t.err == nil && t.set != "", Set: t.set, Objects: t.objects}
		if !t.setAt.IsZero() {
			at := t.setAt.UTC().Truncate(time.Second)
			e.Since = &at
		}
		switch {
		case t.err != nil:
			e.Error = c.scrub(t.err.Error())
		case t.set == "" && !home:
			e.Error = "nothing delivered yet"
			if msg := t.lastWatchErr(); msg != "" {
				e.Error += ": " + c.scrub(msg)
			}
		}
		return e
	}
	out := []status.Cluster{entry(c.home, true)}
	for _, t := range targets {
		out = append(out, entry(t, false))
	}
	for _, p := range problems {
		out = append(out, status.Cluster{Name: p.Name, Secret: p.Secret, Error: c.scrub(p.Message)})
	}
	return out
}

// forCluster are the objects of set that go to cluster name
// (target.clusters).
func forCluster(set []*envoyfilter.Object, name string) []*envoyfilter.Object {
	return envoyfilter.ForCluster(set, name)
}

// reportMembers says in the status's message which member clusters the
// set did not reach, and records a Warning Event whenever that list
// changes.
func (c *Controller) reportMembers(cm *corev1.ConfigMap, st *status.Status) {
	var failed []string
	for _, e := range st.Clusters {
		if e.Error != "" && !e.Home {
			name := e.Name
			if name == "" {
				name = "(Secret " + e.Secret + ")"
			}
			failed = append(failed, fmt.Sprintf("cluster %s: %s", name, e.Error))
		}
	}
	text := strings.Join(failed, "; ")
	if text != "" {
		msg := "the set has not reached every member cluster, and is retried: " + text
		if st.Message == "" {
			st.Message = msg
		} else {
			st.Message += "; " + msg
		}
	}
	if text != c.st.membersWarned {
		if text != "" {
			c.event(cm, corev1.EventTypeWarning, "MemberNotReached", "%s", "the set has not reached every member cluster: "+text)
		} else if c.st.membersWarned != "" {
			c.event(cm, corev1.EventTypeNormal, "MembersReached", "every member cluster holds the set")
		}
		c.st.membersWarned = text
	}
}
