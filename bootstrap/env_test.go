package bootstrap

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/goshmem/goshmem/ucs"
)

func lookupFrom(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

func goodVars() map[string]string {
	return map[string]string{
		EnvJobID:     "job-1",
		EnvRank:      "2",
		EnvSize:      "4",
		EnvSeed:      "127.0.0.1:7946",
		EnvKey:       EncodeKey(bytes.Repeat([]byte{7}, 32)),
		EnvLocalRank: "0",
		EnvLocalSize: "2",
		EnvAgentFD:   "3",
	}
}

func TestEnvFromLookup(t *testing.T) {
	e, ok, err := envFromLookup(lookupFrom(goodVars()))
	if err != nil || !ok {
		t.Fatalf("good environment: %v, %v", ok, err)
	}
	want := Env{JobID: "job-1", Rank: 2, Size: 4, LocalRank: 0, LocalSize: 2, Seed: "127.0.0.1:7946", Key: bytes.Repeat([]byte{7}, 32), AgentFD: 3}
	if e.JobID != want.JobID || e.Rank != want.Rank || e.Size != want.Size || e.LocalRank != want.LocalRank ||
		e.LocalSize != want.LocalSize || e.Seed != want.Seed || !bytes.Equal(e.Key, want.Key) || e.AgentFD != want.AgentFD {
		t.Errorf("got %+v, want %+v", e, want)
	}

	if _, ok, err := envFromLookup(lookupFrom(nil)); ok || err != nil {
		t.Errorf("empty environment: got %v, %v; want false, nil", ok, err)
	}

	tests := []struct {
		name, variable, value string // value "-" unsets it
	}{
		{"missing seed", EnvSeed, "-"},
		{"missing rank", EnvRank, "-"},
		{"missing local size", EnvLocalSize, "-"},
		{"rank not a number", EnvRank, "two"},
		{"rank too large", EnvRank, "4"},
		{"rank negative", EnvRank, "-1"},
		{"size zero", EnvSize, "0"},
		{"local rank too large", EnvLocalRank, "2"},
		{"local size larger than size", EnvLocalSize, "5"},
		{"seed without port", EnvSeed, "127.0.0.1"},
		{"key not base64", EnvKey, "!!!"},
		{"key too short", EnvKey, EncodeKey([]byte("short"))},
		{"job id empty", EnvJobID, ""},
		{"job id with space", EnvJobID, "a b"},
		{"missing agent channel", EnvAgentFD, "-"},
		{"agent channel not a number", EnvAgentFD, "x"},
		{"agent channel on stderr", EnvAgentFD, "2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vars := goodVars()
			if tt.value == "-" {
				delete(vars, tt.variable)
			} else {
				vars[tt.variable] = tt.value
			}
			_, ok, err := envFromLookup(lookupFrom(vars))
			if ok || !errors.Is(err, ucs.ErrInvalidParam) {
				t.Fatalf("got %v, %v; want an error wrapping ucs.ErrInvalidParam", ok, err)
			}
			if !strings.Contains(err.Error(), tt.variable) {
				t.Errorf("error %q does not name %s", err, tt.variable)
			}
		})
	}
}

func TestEnvironRoundTrip(t *testing.T) {
	want := Env{JobID: "j", Rank: 1, Size: 3, LocalRank: 1, LocalSize: 3, Seed: "[::1]:9", Key: bytes.Repeat([]byte{1}, 16), AgentFD: 5}
	vars := map[string]string{}
	for _, kv := range want.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	got, ok, err := envFromLookup(lookupFrom(vars))
	if !ok || err != nil || got.JobID != want.JobID || got.Rank != want.Rank || got.Seed != want.Seed || !bytes.Equal(got.Key, want.Key) || got.AgentFD != want.AgentFD {
		t.Errorf("Environ round trip: got %+v, %v, %v; want %+v", got, ok, err, want)
	}
}

func TestNewKey(t *testing.T) {
	a, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewKey()
	if len(a) != KeySize || bytes.Equal(a, b) {
		t.Errorf("NewKey: %d bytes, two keys equal: %v", len(a), bytes.Equal(a, b))
	}
	if k, err := DecodeKey(EncodeKey(a)); err != nil || !bytes.Equal(k, a) {
		t.Errorf("DecodeKey(EncodeKey(k)) = %x, %v", k, err)
	}
}

// FuzzEnv checks that parsing the environment never panics, and that what
// parses survives Environ.
func FuzzEnv(f *testing.F) {
	g := goodVars()
	f.Add(g[EnvJobID], g[EnvRank], g[EnvSize], g[EnvSeed], g[EnvKey], g[EnvLocalRank], g[EnvLocalSize])
	f.Add("x", "0", "1", "h:1", "", "0", "1")
	f.Add("j", "-0", "+1", ":", "AAAA", "0", "1")
	f.Fuzz(func(t *testing.T, job, rank, size, seed, key, lrank, lsize string) {
		vars := map[string]string{EnvJobID: job, EnvRank: rank, EnvSize: size, EnvSeed: seed,
			EnvKey: key, EnvLocalRank: lrank, EnvLocalSize: lsize}
		e, ok, err := envFromLookup(lookupFrom(vars))
		if err != nil {
			if ok || !errors.Is(err, ucs.ErrInvalidParam) {
				t.Fatalf("got %v, %v", ok, err)
			}
			return
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("parsed env %+v fails Validate: %v", e, err)
		}
		again := map[string]string{}
		for _, kv := range e.Environ() {
			k, v, _ := strings.Cut(kv, "=")
			again[k] = v
		}
		e2, ok, err := envFromLookup(lookupFrom(again))
		if !ok || err != nil || e2.Rank != e.Rank || e2.Size != e.Size || e2.Seed != e.Seed || !bytes.Equal(e2.Key, e.Key) {
			t.Fatalf("Environ of %+v does not parse back: %+v, %v", e, e2, err)
		}
	})
}

func TestTasksOnNode(t *testing.T) {
	tests := []struct {
		list string
		node int
		want int // -1: an error
	}{
		{"3", 0, 3},
		{"3", 1, -1},
		{"2(x3),1", 0, 2},
		{"2(x3),1", 2, 2},
		{"2(x3),1", 3, 1},
		{"2(x3),1", 4, -1},
		{"4,1(x2)", 2, 1},
		{"2(x0)", 0, -1},
		{"2(3)", 0, -1},
		{"x", 0, -1},
		{"", 0, -1},
	}
	for _, tt := range tests {
		got, err := tasksOnNode(tt.list, tt.node)
		if tt.want < 0 {
			if err == nil || !errors.Is(err, ucs.ErrInvalidParam) {
				t.Errorf("tasksOnNode(%q, %d) = %d, %v; want an error wrapping ucs.ErrInvalidParam", tt.list, tt.node, got, err)
			}
			continue
		}
		if got != tt.want || err != nil {
			t.Errorf("tasksOnNode(%q, %d) = %d, %v; want %d", tt.list, tt.node, got, err, tt.want)
		}
	}
}

func TestPlaceFromLookup(t *testing.T) {
	tests := []struct {
		name string
		vars map[string]string
		want Place // Source "" with ok: not found
		bad  string
	}{
		{"none", map[string]string{"SLURM_NTASKS": "4"}, Place{}, ""},
		{"goshmem", map[string]string{EnvRank: "1", EnvSize: "3", EnvLocalRank: "1", EnvLocalSize: "2"},
			Place{Rank: 1, Size: 3, LocalRank: 1, LocalSize: 2, Source: EnvRank}, ""},
		{"open mpi", map[string]string{"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
			"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"},
			Place{Rank: 5, Size: 8, LocalRank: 1, LocalSize: 4, Source: "OMPI_COMM_WORLD_RANK"}, ""},
		{"mpich", map[string]string{"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"},
			Place{Rank: 2, Size: 4, LocalRank: 0, LocalSize: 2, Source: "PMI_RANK"}, ""},
		{"slurm step", map[string]string{"SLURM_PROCID": "6", "SLURM_NTASKS": "7", "SLURM_LOCALID": "0",
			"SLURM_NODEID": "3", "SLURM_STEP_TASKS_PER_NODE": "2(x3),1"},
			Place{Rank: 6, Size: 7, LocalRank: 0, LocalSize: 1, Source: "SLURM_PROCID"}, ""},
		{"slurm job list", map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "3", "SLURM_LOCALID": "1",
			"SLURM_TASKS_PER_NODE": "3"},
			Place{Rank: 1, Size: 3, LocalRank: 1, LocalSize: 3, Source: "SLURM_PROCID"}, ""},
		// mpirun inside a Slurm batch script: the batch step's SLURM_PROCID=0
		// is inherited, Open MPI's variables are the process's own.
		{"mpirun under slurm", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0",
			"SLURM_TASKS_PER_NODE": "1", "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
			"OMPI_COMM_WORLD_LOCAL_RANK": "3", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"},
			Place{Rank: 3, Size: 4, LocalRank: 3, LocalSize: 4, Source: "OMPI_COMM_WORLD_RANK"}, ""},
		{"slurm without tasks per node", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0"},
			Place{}, "SLURM_STEP_TASKS_PER_NODE"},
		{"open mpi without local size", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
			"OMPI_COMM_WORLD_LOCAL_RANK": "0"}, Place{}, "OMPI_COMM_WORLD_LOCAL_SIZE"},
		{"rank beyond size", map[string]string{"PMI_RANK": "4", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "1"},
			Place{}, "PMI_RANK"},
		{"local rank beyond local size", map[string]string{"PMI_RANK": "1", "PMI_SIZE": "4", "MPI_LOCALRANKID": "2", "MPI_LOCALNRANKS": "2"},
			Place{}, "MPI_LOCALRANKID"},
		{"slurm node beyond list", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0",
			"SLURM_NODEID": "2", "SLURM_STEP_TASKS_PER_NODE": "1(x2)"}, Place{}, "SLURM_STEP_TASKS_PER_NODE"},
		{"not a number", map[string]string{"SLURM_PROCID": "one", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0",
			"SLURM_STEP_TASKS_PER_NODE": "2"}, Place{}, "SLURM_PROCID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := placeFromLookup(lookupFrom(tt.vars))
			if tt.bad != "" {
				if ok || !errors.Is(err, ucs.ErrInvalidParam) || !strings.Contains(err.Error(), tt.bad) {
					t.Fatalf("got %+v, %v, %v; want an error wrapping ucs.ErrInvalidParam naming %s", got, ok, err, tt.bad)
				}
				return
			}
			if err != nil || ok != (tt.want.Source != "") || got != tt.want {
				t.Errorf("got %+v, %v, %v; want %+v", got, ok, err, tt.want)
			}
		})
	}
}

// TestEnvFromSpawner: the launcher's variables with the place of a spawner.
func TestEnvFromSpawner(t *testing.T) {
	launcherVars := func() map[string]string {
		v := goodVars()
		delete(v, EnvRank)
		delete(v, EnvLocalRank)
		delete(v, EnvLocalSize)
		return v
	}
	v := launcherVars()
	for k, val := range map[string]string{"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1",
		"SLURM_NODEID": "1", "SLURM_STEP_TASKS_PER_NODE": "2(x2)"} {
		v[k] = val
	}
	e, ok, err := envFromLookup(lookupFrom(v))
	if !ok || err != nil || e.Rank != 3 || e.Size != 4 || e.LocalRank != 1 || e.LocalSize != 2 {
		t.Errorf("launcher variables under srun: got %+v, %v, %v; want rank 3 of 4, local 1 of 2", e, ok, err)
	}

	v["SLURM_NTASKS"] = "5"
	if _, ok, err := envFromLookup(lookupFrom(v)); ok || !errors.Is(err, ucs.ErrInvalidParam) || !strings.Contains(err.Error(), EnvSize) {
		t.Errorf("srun of 5 tasks for a job of 4: got %v, %v; want an error naming %s", ok, err, EnvSize)
	}

	// GOSHMEM_RANK wins over a spawner's rank.
	v = goodVars()
	v["OMPI_COMM_WORLD_RANK"] = "0"
	if e, ok, err := envFromLookup(lookupFrom(v)); !ok || err != nil || e.Rank != 2 {
		t.Errorf("GOSHMEM_RANK=2 beside OMPI_COMM_WORLD_RANK=0: got %+v, %v, %v; want rank 2", e, ok, err)
	}
}

func TestFailureTimeoutEnv(t *testing.T) {
	tests := []struct {
		value string
		want  time.Duration
		ok    bool
	}{
		{"", 0, true},
		{"3s", 3 * time.Second, true},
		{"1500ms", 1500 * time.Millisecond, true},
		{"10ms", 0, false},
		{"soon", 0, false},
	}
	for _, tt := range tests {
		v := goodVars()
		v[EnvFailureTimeout] = tt.value
		e, ok, err := envFromLookup(lookupFrom(v))
		if tt.ok != (err == nil) || (tt.ok && (!ok || e.FailureTimeout != tt.want)) {
			t.Errorf("%s=%q: got %v, %v, %v; want %v (ok %v)", EnvFailureTimeout, tt.value, e.FailureTimeout, ok, err, tt.want, tt.ok)
		}
		if !tt.ok && !strings.Contains(err.Error(), EnvFailureTimeout) {
			t.Errorf("%s=%q: error %q does not name it", EnvFailureTimeout, tt.value, err)
		}
		if tt.ok && tt.want != 0 {
			found := false
			for _, kv := range e.Environ() {
				found = found || kv == EnvFailureTimeout+"="+tt.want.String()
			}
			if !found {
				t.Errorf("Environ of %+v lacks %s", e, EnvFailureTimeout)
			}
		}
	}
}
