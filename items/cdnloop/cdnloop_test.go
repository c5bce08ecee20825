package cdnloop_test

import (
	"testing"

	"github.com/globalconfig/globalconfig/test/goldentest"
)

func TestGolden(t *testing.T) { goldentest.Run(t, "testdata") }
