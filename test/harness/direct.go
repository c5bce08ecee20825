package harness

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/globalconfig/globalconfig/envoyfilter"
)

// DirectCopy is item's EnvoyFilter of objs as a hand-written one, JSON for
// a server-side apply: named name, labelled as no globalconfig object,
// without globalconfig's annotations, and its filter renamed filter, so
// that it and globalconfig's can stand in one gateway. The benchmarks
// time it against the same patch through the controller.
func DirectCopy(objs []*envoyfilter.Object, item, name, filter string) ([]byte, error) {
	for _, o := range objs {
		if o.Item() != item {
			continue
		}
		o.Metadata.Name = name
		o.Metadata.Labels = map[string]string{"app.kubernetes.io/name": "direct"}
		o.Metadata.Annotations = nil
		for _, cp := range o.Spec.GetConfigPatches() {
			cp.GetPatch().GetValue().GetFields()["name"] = structpb.NewStringValue(filter)
		}
		return json.Marshal(o)
	}
	return nil, fmt.Errorf("no %s EnvoyFilter", item)
}
