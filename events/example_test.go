package events_test

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/parley-dev/parley/events"
)

func ExampleEncode() {
	e, err := events.NewWithID("7b0e", events.SourceCLI, events.TypeElicitationExpired, "thread-1",
		events.ElicitationExpired{TurnID: "turn-1", ElicitationIDs: []string{"e1"}})
	if err != nil {
		panic(err)
	}
	e.SetTime(time.Date(2026, 5, 17, 10, 0, 0, 0, time.UTC))
	e.SetExtension(events.ExtTurnID, "turn 1 ✓")
	h, body, err := events.Encode(e)
	if err != nil {
		panic(err)
	}
	for _, name := range slices.Sorted(maps.Keys(h)) {
		fmt.Printf("%s: %s\n", name, h[name][0])
	}
	fmt.Printf("%s\n", body)

	back, err := events.Decode(h, body)
	if err != nil {
		panic(err)
	}
	fmt.Println(back.Extensions()[events.ExtTurnID])
	// Output:
	// ce-datacontenttype: application/json
	// ce-dataschema: https://parley.dev/schema/dev.parley.elicitation.expired.json
	// ce-id: 7b0e
	// ce-source: /parley/cli
	// ce-specversion: 1.0
	// ce-subject: thread-1
	// ce-time: 2026-05-17T10:00:00Z
	// ce-turnid: turn%201%20%E2%9C%93
	// ce-type: dev.parley.elicitation.expired
	// {"turnId":"turn-1","elicitationIds":["e1"]}
	// turn 1 ✓
}

func ExampleChatSubject() {
	subj := events.ChatSubject("thread-1", events.ChatTurnRequested)
	fmt.Println(subj)
	thread, suffix, ok := events.ParseChatSubject(subj)
	fmt.Println(thread, suffix, ok)
	fmt.Println(events.ChatThreadSubjects("thread-1"))
	fmt.Println(events.DeadLetterSubject(events.StreamAgent, "agent"))
	// Output:
	// parley.chat.thread-1.turn.requested
	// thread-1 turn.requested true
	// parley.chat.thread-1.>
	// parley.dlq.PARLEY_AGENT.agent
}
