package controller

import (
	"encoding/json"
	"maps"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

var configMapsResource = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// versionedConfigMaps gives the fake API server's ConfigMaps the
// optimistic concurrency of a real one: every create, update and
// server-side apply that changes something sets a new resourceVersion;
// an update or apply that carries another one than the object's is
// refused (Conflict); an apply that changes nothing is a no-op; a create
// of an existing object is refused (AlreadyExists).
func versionedConfigMaps(kube *fake.Clientset, version *int) {
	kube.PrependReactor("create", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		cm := a.(k8stesting.CreateAction).GetObject().(*corev1.ConfigMap).DeepCopy()
		if _, err := kube.Tracker().Get(configMapsResource, a.GetNamespace(), cm.Name); err == nil {
			return true, nil, apierrors.NewAlreadyExists(configMapsResource.GroupResource(), cm.Name)
		}
		*version++
		cm.ResourceVersion = strconv.Itoa(*version)
		return true, cm, kube.Tracker().Create(configMapsResource, cm, a.GetNamespace())
	})
	kube.PrependReactor("patch", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.PatchAction)
		if p.GetPatchType() != types.ApplyPatchType {
			return false, nil, nil
		}
		cm := &corev1.ConfigMap{}
		if err := json.Unmarshal(p.GetPatch(), cm); err != nil {
			return true, nil, err
		}
		old, err := kube.Tracker().Get(configMapsResource, p.GetNamespace(), p.GetName())
		exists := err == nil
		if rv := cm.ResourceVersion; rv != "" && (!exists || rv != old.(*corev1.ConfigMap).ResourceVersion) {
			return true, nil, apierrors.NewConflict(configMapsResource.GroupResource(), p.GetName(), errStale)
		}
		if exists {
			prev := old.(*corev1.ConfigMap)
			if equalMaps(prev.Data, cm.Data) && equalMaps(prev.Labels, cm.Labels) && (cm.Annotations == nil || equalMaps(prev.Annotations, cm.Annotations)) {
				return true, prev, nil // a no-op apply: no new resourceVersion
			}
		}
		*version++
		cm.ResourceVersion = strconv.Itoa(*version)
		cm.Namespace = p.GetNamespace()
		if !exists {
			return true, cm, kube.Tracker().Create(configMapsResource, cm, p.GetNamespace())
		}
		return true, cm, kube.Tracker().Update(configMapsResource, cm, p.GetNamespace())
	})
	kube.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		cm := a.(k8stesting.UpdateAction).GetObject().(*corev1.ConfigMap).DeepCopy()
		old, err := kube.Tracker().Get(configMapsResource, a.GetNamespace(), cm.Name)
		if err != nil {
			return true, nil, err
		}
		if rv := cm.ResourceVersion; rv != "" && rv != old.(*corev1.ConfigMap).ResourceVersion {
			return true, nil, apierrors.NewConflict(configMapsResource.GroupResource(), cm.Name, errStale)
		}
		*version++
		cm.ResourceVersion = strconv.Itoa(*version)
		return true, cm, kube.Tracker().Update(configMapsResource, cm, a.GetNamespace())
	})
}

type staleError struct{}

func (staleError) Error() string {
	return "the object has been modified; please apply your changes to the latest version and try again"
}

var errStale = staleError{}

func equalMaps(a, b map[string]string) bool { return maps.Equal(a, b) }
