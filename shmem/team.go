package shmem

// Team is a set of PEs that take part in team collectives and team
// contexts (shmem_team_t). For now the only team is TeamWorld, the team of
// every PE of the job; the routines that split teams and create team
// contexts come later and keep this type.
type Team struct {
	me, npes int
}

// teamWorld is the team of every PE; Init fills it.
var teamWorld = Team{me: -1, npes: -1}

// TeamWorld is the team of every PE of the job (SHMEM_TEAM_WORLD), with the
// PE numbers of the job.
var TeamWorld = &teamWorld

// MyPE returns the number of this PE in the team (shmem_team_my_pe), -1
// before Init.
func (t *Team) MyPE() int { return t.me }

// NPEs returns the number of PEs of the team (shmem_team_n_pes), -1 before
// Init.
func (t *Team) NPEs() int { return t.npes }
