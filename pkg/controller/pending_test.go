package controller

import (
	"testing"

	clientnetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func live(rv string) liveFilter {
	return liveFilter{&clientnetworking.EnvoyFilter{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv}}}
}

// A write of ours stands until the cache shows its result; a create that
// someone deleted before the cache showed it must not stand forever.
func TestWriteStands(t *testing.T) {
	c := &Controller{st: state{pending: map[string]string{}}}
	const key = "istio-system/globalconfig-gzip"

	if c.writeStands(key, liveFilter{}, false) {
		t.Error("no write pending, yet it stands")
	}

	c.st.pending[key] = createdMark + "uid-1"
	if !c.writeStands(key, liveFilter{}, false) {
		t.Error("a create not yet in the cache does not stand")
	}
	if c.writeStands(key, live("5"), true) {
		t.Error("a create the cache shows still stands")
	}
	c.gone.Store(types.UID("uid-1"), struct{}{})
	if c.writeStands(key, liveFilter{}, false) {
		t.Error("a create that was deleted still stands: it would never be restored")
	}
	if _, ok := c.st.pending[key]; ok {
		t.Error("the mark of the deleted create was kept")
	}

	c.st.pending[key] = "7" // an update or delete, written over version 7
	if !c.writeStands(key, live("7"), true) {
		t.Error("the cache still shows the version we wrote over, yet the write does not stand")
	}
	if c.writeStands(key, live("8"), true) || c.writeStands(key, liveFilter{}, false) {
		t.Error("the cache moved on, yet the write stands")
	}
}
