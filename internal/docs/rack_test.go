package docs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/shoenig/test/must"
)

// The node meta the placement core reads a node's rack from
// (placement.MetaRack, which the reasons' "group kept in rack r1" name)
// is documented: the operators' guide says how to set it in a client's
// meta, the users' guide what it does to a group.
func TestRackMetaIsDocumented(t *testing.T) {
	ops, err := os.ReadFile(filepath.Join(root, "docs", "operators.md"))
	must.NoError(t, err)
	must.StrContains(t, string(ops), "meta {\n    "+placement.MetaRack+" = ")
	must.StrContains(t, string(ops), "group kept in rack")
	users, err := os.ReadFile(filepath.Join(root, "docs", "users.md"))
	must.NoError(t, err)
	must.StrContains(t, string(users), "client meta `"+placement.MetaRack+"`")
	must.StrContains(t, string(users), "${meta."+placement.MetaRack+"}")
}
