package extclient

import (
	"context"
	"sync"

	"github.com/sqsinbox/sqsinbox/harness/sqstest"
)

// kitFiles are the files of harness/tools/extclient that make an install. Their hash names the
// install directory, so a changed pin or script gets a fresh install.
var kitFiles = []string{"package.json", "package-lock.json", "hooks.mjs", "lib.mjs", "send.mjs", "receive.mjs"}

// Install returns the directory that holds the kit, installing it first if needed, as the tests'
// other npm kits are (sqstest.NpmKit: npm ci of the committed lock file into
// ~/.cache/sqsinbox/extclient-<version>-<hash>, once per machine). [Send] and [Receive] call it.
func Install(ctx context.Context) (string, error) {
	return sqstest.NpmKit(ctx, "extclient", LibraryVersion, kitFiles)
}

var (
	nodeMu   sync.Mutex
	nodePath string
)

// nodeBinary returns the Node that runs the kit: fauxqs's (sqstest.FauxqsNode), the one its lock
// file pins where the platform has it, else the node on PATH if recent enough.
func nodeBinary(ctx context.Context) (string, error) {
	nodeMu.Lock()
	defer nodeMu.Unlock()
	if nodePath == "" {
		n, err := sqstest.FauxqsNode(ctx)
		if err != nil {
			return "", err
		}
		nodePath = n
	}
	return nodePath, nil
}
