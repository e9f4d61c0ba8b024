// Package chaos holds parley's chaos test: a real nats-server
// process with JetStream file storage and two replicas of every worker
// (processor, agent, toolexec, gate) as separate OS processes, under load,
// while a random worker is SIGKILLed and restarted about every second and
// the NATS server itself is restarted once.
//
// The test (chaos_test.go, TestChaos) builds ./cmd/parley and the
// nats-server of the module graph once, sends a few hundred turns over many
// threads, answers every tool confirmation (in random order, accept or
// decline with instructions, some twice, some from several goroutines at
// once), waits until every turn ended and then checks, from the PARLEY_CHAT
// stream, the site ledger and the site content:
//
//   - no lost turn: every turn.requested ends with turn.completed or
//     turn.failed for its turn ID (a failed turn fails the test too: nothing
//     in this workload should fail);
//   - exactly-once effects: one create_event effect per accepted
//     confirmation that won, none for a declined one, never two;
//   - exactly-once answers: per elicitation exactly one answer consumed,
//     every other copy rejected (already_consumed);
//   - no duplicate user-visible events: no CloudEvent ID twice in the
//     stream, at most one turn end per turn ID, at most one
//     elicitation.requested per elicitation ID;
//   - FIFO per thread: a thread's turns end in the order they were sent.
//
// Per thread, turns are sent in bursts published back to back; only the
// last turn of a burst can pause ("plan three events for X"), the others are
// "list all events", and the next burst is sent once the previous one ended.
// So a queued message never lands on a paused turn of its own burst when
// the processor handles a thread's messages in order: any unplanned
// elicitation.cancelled is reported as a FIFO failure.
//
// Every fifth thread starts with a supersede burst: a plan turn and a list
// turn back to back (the list turn was in the stream before the plan turn
// paused, so it queues behind it), then, once the plan turn paused, a
// second list turn. It must supersede the plan turn (elicitation.cancelled,
// its only end) and run after the queued list turn (FIFO across a
// supersede).
//
// Faults besides the SIGKILLs and the NATS restart: one processor replica
// is frozen (SIGSTOP) for 20 s, longer than the consumers' AckWait (15 s),
// so its messages are redelivered to the other replica and handled again
// when it wakes (late run outcomes must be ignored); and the processors
// run with PARLEY_FAULT_EXIT=after-supersede,after-pause-record,after-resume,
// which makes one of them exit, once per point, between storing a
// superseded turn's withdrawn questions (in the thread record) and
// announcing them (the redelivered message must announce them), between
// storing a pause record and recording the pause in the thread (the
// redelivered run.paused must record it, with the stored record's
// expiry), and between resuming a turn in the thread record and
// publishing run.resumed (the redelivered answer must publish it).
//
//	go test ./chaos -run TestChaos -v -count=1
//	go test ./chaos -run TestChaos -v -count=1 -chaos.turns 1000 -chaos.duration 3m
//
// It is skipped with -short. Worker and server logs are kept under the
// test's temporary directory; their paths are printed when the test fails.
//
// Test-only: it may import any of parley's packages, and nothing imports it.
package chaos
